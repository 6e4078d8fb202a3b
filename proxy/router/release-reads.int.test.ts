/**
 * What the router's relay relies on to free memory early (lib/release-buffer.ts): undici hands a
 * GET's body over as views of the socket's reads and keeps no other use of a read it handed out
 * whole (dispatched-exchange.ts frees those once written); node:http's server parser gives every
 * upload chunk memory of its own (relay-chunks.ts frees it once written upstream). An undici or
 * Node release that broke either would fail here before it could corrupt a relayed body.
 */
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Dispatcher, Pool } from 'undici';
import { DispatchedExchange } from './dispatched-exchange.ts';
import { responseHeaderList } from './hop-by-hop.ts';

const body = randomBytes(8 * 1024 * 1024 + 17);
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

describe("what the relay frees early is nobody else's", () => {
  it('undici (GETs): whole-read body chunks are freed once written; bodies stay intact over one keep-alive connection, with backpressure', async () => {
    const pool = new Pool(base, { connections: 1, headersTimeout: 0, bodyTimeout: 0 });
    let chunks: Buffer[] = [];
    let pauses = 0;
    // The exchange as the router uses it, recording what undici hands over.
    class Recording extends DispatchedExchange {
      override onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
        chunks.push(chunk);
        super.onResponseData(controller, chunk);
        if (controller.paused) pauses++;
      }
    }
    const front = http.createServer((_req, res) => {
      const exchange = new Recording({
        onResponse(response) {
          res.writeHead(response.status, responseHeaderList(response.rawHeaders, response.connection, undefined));
          response.relayTo(res, (err) => err && res.destroy());
        },
        onError: () => res.destroy(),
      });
      pool.dispatch({ method: 'GET', path: '/', headers: [] }, exchange);
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    const frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}/`;
    try {
      // Three times over the one upstream connection; the last client reads nothing for a while.
      for (let round = 0; round < 3; round++) {
        chunks = [];
        const received = await new Promise<Buffer>((resolve, reject) => {
          http
            .get(frontUrl, { agent: false }, (res) => {
              const parts: Buffer[] = [];
              res.on('data', (part: Buffer) => parts.push(part));
              res.on('end', () => resolve(Buffer.concat(parts)));
              res.on('error', reject);
              if (round === 2) {
                res.pause();
                setTimeout(() => res.resume(), 300);
              }
            })
            .on('error', reject);
        });
        expect(digest(received)).toBe(digest(body));
        // The large chunks that were whole reads were freed: the release does apply to undici's chunks.
        expect(chunks.filter((c) => c.buffer.byteLength === 0).length).toBeGreaterThan(0);
      }
      expect(pauses).toBeGreaterThan(0);
    } finally {
      await new Promise((resolve) => front.close(resolve));
      await pool.destroy();
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
