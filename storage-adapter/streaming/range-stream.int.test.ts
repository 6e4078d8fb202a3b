/**
 * What a ranged GET to an HTTP store does when the store misbehaves, against a local HTTP server
 * answering as a broken store or a proxy that ignores Range would: each is a 502-class
 * `upstream_unreachable` (the store's fault), never a read of the whole object, never a plain error
 * that the content route would report as a damaged catalog.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openRangeStream, rangeStreamReader } from './range-stream.ts';

const SIZE = 1000;
let server: http.Server;
let base: string;
/** Bytes the server managed to write of its whole-object answers (it stops when the client goes). */
let wholeBytesWritten = 0;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === '/short-range') {
      // Asked for 0-199 of 1000; says (and sends) 0-99.
      res.writeHead(206, { 'content-range': `bytes 0-99/${SIZE}`, 'content-length': '100' }).end(Buffer.alloc(100));
    } else if (req.url === '/short-body') {
      // Says 0-199, sends 100 bytes and ends the message cleanly (no Content-Length: chunked).
      res.writeHead(206, { 'content-range': `bytes 0-199/${SIZE}` });
      res.end(Buffer.alloc(100));
    } else {
      // Ignores Range: the whole object, large, written as fast as the client takes it.
      res.writeHead(200, { 'content-length': String(256 * 1024 * 1024) });
      const chunk = Buffer.alloc(1024 * 1024);
      const pump = () => {
        while (!res.destroyed && wholeBytesWritten < 256 * 1024 * 1024) {
          wholeBytesWritten += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      res.on('close', () => res.destroy());
      pump();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const getFrom = (path: string) => (range: string, highWaterMark: number) =>
  request(`${base}${path}`, { headers: { range }, highWaterMark });
const what = (path: string) => ({ sha256: 'a'.repeat(64), target: path, timeoutMs: 30_000 });

describe('openRangeStream against a misbehaving store', () => {
  it('a 206 whose range ends before the one asked for is upstream_unreachable', async () => {
    await expect(openRangeStream(getFrom('/short-range'), what('/short-range'), 0, 199)).rejects.toMatchObject({
      code: 'upstream_unreachable',
    });
  });

  it('a 200 (the whole object) to a range further on is upstream_unreachable, and the object is not read', async () => {
    // Even with an onError that reads error bodies (the S3 store's): a 200 never reaches it.
    let errorBodyRead = false;
    const failing = {
      ...what('/whole'),
      onError: async () => {
        errorBodyRead = true;
        throw new Error('not an error answer');
      },
    };
    await expect(openRangeStream(getFrom('/whole'), failing, 500, 599)).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringMatching(/whole object \(200\)/),
    });
    expect(errorBodyRead).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(wholeBytesWritten).toBeLessThan(64 * 1024 * 1024);
  });

  it('a body that ends before its range is upstream_unreachable from chunks()', async () => {
    const reader = rangeStreamReader('a'.repeat(64), SIZE, [{ start: 0, end: 199 }], undefined, (start, end) =>
      openRangeStream(getFrom('/short-body'), what('/short-body'), start, end),
    );
    const read = async () => {
      for await (const chunk of reader.chunks!({ start: 0, end: 199 }, new AbortController().signal)) void chunk;
    };
    await expect(read()).rejects.toMatchObject({ code: 'upstream_unreachable' });
    await reader.close();
  });

  it('a body that ends before its range is upstream_unreachable from read() too, not the end of the blob', async () => {
    // read() is what the response writer and the slice cache use with the S3 store's socket reads.
    const reader = rangeStreamReader('a'.repeat(64), SIZE, [{ start: 0, end: 199 }], undefined, (start, end) =>
      openRangeStream(getFrom('/short-body'), what('/short-body'), start, end),
    );
    const buffer = Buffer.alloc(200);
    let position = 0;
    const read = async () => {
      for (;;) {
        const { bytesRead } = await reader.read(buffer, position, 200 - position, position);
        if (bytesRead === 0) return;
        position += bytesRead;
      }
    };
    await expect(read()).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('at byte 100, before byte 199'),
    });
    expect(position).toBe(100);
    await reader.close();
  });
});
