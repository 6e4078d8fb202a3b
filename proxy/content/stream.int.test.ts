import { randomBytes } from 'node:crypto';
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { request } from '../../test/support/content.ts';
import type { Segment } from './response.ts';
import { sendSegments } from './stream.ts';

async function serveWith(handler: (res: http.ServerResponse) => Promise<void>): Promise<string> {
  const server = http.createServer((_req, res) => void handler(res).catch(() => res.destroy()));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

describe('sendSegments', () => {
  it('charges a download meter per chunk of at most one quantum, bytes between ranges included, and sends the exact bytes', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-stream-'));
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    const data = randomBytes(1_000_000);
    await writeFile(path.join(dir, 'blob'), data);
    const taken: number[] = [];
    const meter = { quantumBytes: 16 * 1024, take: async (n: number) => void taken.push(n) };
    const segments: Segment[] = [
      { kind: 'bytes', data: Buffer.from('head|') },
      { kind: 'range', range: { start: 1000, end: 900_000 } },
      { kind: 'bytes', data: Buffer.from('|tail') },
    ];
    const url = await serveWith(async (res) => {
      const handle = await open(path.join(dir, 'blob'), 'r');
      try {
        await sendSegments(res, handle, segments, meter, { signal: new AbortController().signal });
      } finally {
        await handle.close();
      }
    });
    const res = await request(url);
    expect(
      res.body.equals(Buffer.concat([Buffer.from('head|'), data.subarray(1000, 900_001), Buffer.from('|tail')])),
    ).toBe(true);
    expect(taken.reduce((a, b) => a + b, 0)).toBe(res.body.length);
    expect(Math.max(...taken)).toBeLessThanOrEqual(16 * 1024);
  });
});

describe('sendSegments, multipart/byteranges', () => {
  it('charges the heads of the parts: 100 one-byte ranges are paced as the bytes the client gets, not as 100', async () => {
    const data = randomBytes(20_000);
    const taken: number[] = [];
    const meter = { quantumBytes: 1000, take: async (n: number) => void taken.push(n) };
    const segments: Segment[] = [];
    for (let i = 0; i < 100; i++) {
      segments.push(
        {
          kind: 'bytes',
          data: Buffer.from(
            `\r\n--b\r\ncontent-type: ${'x'.repeat(200)}\r\ncontent-range: bytes ${i * 100}-${i * 100}/20000\r\n\r\n`,
          ),
        },
        { kind: 'range', range: { start: i * 100, end: i * 100 } },
      );
    }
    segments.push({ kind: 'bytes', data: Buffer.from('\r\n--b--\r\n') });
    const url = await serveWith((res) =>
      sendSegments(
        res,
        { read: (b, o, n, p) => Promise.resolve({ bytesRead: data.copy(b, o, p, p + n) }) },
        segments,
        meter,
        {
          signal: new AbortController().signal,
        },
      ),
    );
    const res = await request(url);
    expect(res.body.length).toBeGreaterThan(20_000);
    expect(taken.reduce((a, b) => a + b, 0)).toBe(res.body.length);
    expect(Math.max(...taken)).toBeLessThanOrEqual(1000);
  });
});

describe('sendSegments with a streaming reader (the static-HTTP store)', () => {
  it('writes the store chunks of each range in order, charging the meter in quanta for every body byte, exact bytes', async () => {
    const data = randomBytes(600_000);
    const taken: number[] = [];
    const meter = { quantumBytes: 10_000, take: async (n: number) => void taken.push(n) };
    const asked: Array<[number, number]> = [];
    // Chunks of uneven sizes, as a socket hands them over.
    const reader = {
      read: async () => ({ bytesRead: 0 }),
      async *chunks(range: { start: number; end: number }) {
        asked.push([range.start, range.end]);
        for (let p = range.start; p <= range.end; p += 65_521)
          yield data.subarray(p, Math.min(p + 65_521, range.end + 1));
      },
    };
    const segments: Segment[] = [
      { kind: 'range', range: { start: 500_000, end: 599_999 } },
      { kind: 'bytes', data: Buffer.from('|') },
      { kind: 'range', range: { start: 0, end: 250_000 } },
    ];
    const url = await serveWith((res) =>
      sendSegments(res, reader, segments, meter, { signal: new AbortController().signal }),
    );
    const res = await request(url);
    expect(res.body.equals(Buffer.concat([data.subarray(500_000), Buffer.from('|'), data.subarray(0, 250_001)]))).toBe(
      true,
    );
    expect(asked).toEqual([
      [500_000, 599_999],
      [0, 250_000],
    ]);
    expect(taken.reduce((a, b) => a + b, 0)).toBe(res.body.length);
    expect(Math.max(...taken)).toBeLessThanOrEqual(10_000);
  });
});
