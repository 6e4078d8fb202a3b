/**
 * What the router's relay relies on to free memory early (proxy/router/proxy-handler.ts, lib/release-buffer.ts):
 * node:http's parsers copy every body chunk into memory of its own, never a view of the socket
 * read it came in, so a read can be freed once the parser ran and a chunk once it was written. A
 * Node release that stopped copying would fail here before it could corrupt a relayed body.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withReleasedReads } from './proxy-handler.ts';

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
  it('client: no body chunk shares memory with a read; reads freed after the parser ran leave bodies intact', async () => {
    // The router's agent (proxy-handler.ts): each socket frees its large reads a microtask after 'data'.
    const agent = withReleasedReads(new http.Agent({ keepAlive: true, maxSockets: 1 }));
    try {
      // Three times over one keep-alive socket: from the second on, node:http's listener comes after ours.
      for (let round = 0; round < 3; round++) {
        const reads = new Set<ArrayBufferLike>();
        const chunks: Buffer[] = [];
        const received = await new Promise<Buffer>((resolve, reject) => {
          const req = http.get(base, { agent }, (res) => {
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('end', () => resolve(Buffer.concat(chunks)));
            res.on('error', reject);
          });
          req.on('error', reject);
          req.once('socket', (socket: Socket) => {
            const onRead = (read: Buffer) => reads.add(read.buffer);
            socket.on('data', onRead);
            req.once('close', () => socket.removeListener('data', onRead));
          });
        });
        expect(digest(received)).toBe(digest(body));
        expect(reads.size).toBeGreaterThan(1);
        // The large reads were freed (so the release did run) and no body chunk lived in one.
        expect([...reads].filter((read) => read.byteLength === 0).length).toBeGreaterThan(0);
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
