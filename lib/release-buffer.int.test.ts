/**
 * What the router's relay relies on to free memory early (proxy-handler.ts, lib/release-buffer.ts):
 * node:http's parsers copy every body chunk into memory of its own, never a view of the socket
 * read it came in, so a read can be freed once the parser ran and a chunk once it was written. A
 * Node release that stopped copying would fail here before it could corrupt a relayed body.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { releaseBuffer } from './release-buffer.ts';

const body = randomBytes(3 * 1024 * 1024 + 17);
const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
let server: http.Server;
let base: string;
/** Body chunks the server's parser handed to the handler of the last upload, and what arrived. */
let uploaded: { chunks: Buffer[]; digest: string } | undefined;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.method === 'PUT') {
      const chunks: Buffer[] = [];
      const hash = createHash('sha256');
      req.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        hash.update(chunk);
      });
      req.on('end', () => {
        uploaded = { chunks, digest: hash.digest('hex') };
        res.end();
      });
      return;
    }
    res.writeHead(200, { 'content-length': body.length });
    // Several writes, so the client reads the body in many socket reads.
    for (let at = 0; at < body.length; at += 200_000) res.write(body.subarray(at, at + 200_000));
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

describe("node:http's parsers copy body bytes out of socket reads", () => {
  it('client: no body chunk shares memory with a read; reads freed after parsing leave the body intact', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      // Twice over one keep-alive socket: the second request re-adds node:http's listener.
      for (let round = 0; round < 2; round++) {
        const reads = new Set<ArrayBufferLike>();
        const chunks: Buffer[] = [];
        const received = await new Promise<Buffer>((resolve, reject) => {
          const req = http.get(base, { agent }, (res) => {
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('end', () => resolve(Buffer.concat(chunks)));
            res.on('error', reject);
          });
          req.on('error', reject);
          // As the router does: after node:http's own 'data' listener, note the read and free it.
          req.once('socket', (socket: Socket) => {
            const onRead = (read: Buffer) => {
              reads.add(read.buffer);
              releaseBuffer(read);
            };
            socket.on('data', onRead);
            req.once('close', () => socket.removeListener('data', onRead));
          });
        });
        expect(reads.size).toBeGreaterThan(1);
        expect(digest(received)).toBe(digest(body));
        for (const chunk of chunks) {
          expect(reads.has(chunk.buffer)).toBe(false);
          expect(chunk.byteOffset).toBe(0);
          expect(chunk.byteLength).toBe(chunk.buffer.byteLength);
        }
      }
    } finally {
      agent.destroy();
    }
  });

  it('server: each upload chunk is memory of its own (freeing one after use touches no other)', async () => {
    await new Promise<void>((resolve, reject) => {
      const req = http.request(base, { method: 'PUT', headers: { 'content-length': body.length } }, (res) => {
        res.resume();
        res.on('end', resolve);
      });
      req.on('error', reject);
      for (let at = 0; at < body.length; at += 100_000) req.write(body.subarray(at, at + 100_000));
      req.end();
    });
    const { chunks, digest: arrived } = uploaded!;
    expect(arrived).toBe(digest(body));
    expect(chunks.length).toBeGreaterThan(1);
    expect(new Set(chunks.map((c) => c.buffer)).size).toBe(chunks.length);
    for (const chunk of chunks) {
      expect(chunk.byteOffset).toBe(0);
      expect(chunk.byteLength).toBe(chunk.buffer.byteLength);
    }
  });
});
