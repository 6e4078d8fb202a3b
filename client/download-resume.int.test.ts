/**
 * The resuming client against servers that do not keep the HTTP rules a resume relies on: a mirror
 * that ignores `If-Range` and answers a resume of a changed object with a `206` of its new bytes, or
 * with a `416` when the new object is exactly as long as the bytes held.
 * And one whose chunked 206 runs past its Content-Range.
 * Plain Node servers stand in for them (no gateway would answer so). A `416` whose size is where
 * the resume starts is the end only while the object is the one the bytes belong to.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { download, upload } from './index.ts';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const reprDigest = (b: Buffer) => `sha-256=:${createHash('sha256').update(b).digest('base64')}:`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-resume-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function listen(handler: http.RequestListener): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Serves `body` with the gateway's validators; a Range is honoured whatever `If-Range` says. */
function serveIgnoringIfRange(res: http.ServerResponse, req: http.IncomingMessage, body: Buffer): void {
  const headers = { etag: `"${sha(body)}"`, 'repr-digest': reprDigest(body), 'accept-ranges': 'bytes' };
  const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
  if (!range) {
    res.writeHead(200, { ...headers, 'content-length': String(body.length) });
    res.end(body);
    return;
  }
  const start = Number(range[1]);
  if (start >= body.length) {
    res.writeHead(416, { 'content-range': `bytes */${body.length}`, 'content-length': '0' });
    res.end();
    return;
  }
  res.writeHead(206, {
    ...headers,
    'content-length': String(body.length - start),
    'content-range': `bytes ${start}-${body.length - 1}/${body.length}`,
  });
  res.end(body.subarray(start));
}

describe('arkvory get against a mirror that ignores If-Range', () => {
  it.each([
    ['a 206 of another representation', 256 * 1024],
    ['a 416 saying the changed object ends where the bytes held do', 128 * 1024],
  ])('starts over when a resume is answered with %s', async (_what, newSize) => {
    const before = Buffer.alloc(256 * 1024, 1);
    const after = Buffer.alloc(newSize, 2);
    // An earlier run, killed, holds half of the old bytes; the object has changed since.
    const output = path.join(dir, `changed-${newSize}.bin`);
    await writeFile(`${output}.partial`, before.subarray(0, before.length / 2));
    await writeFile(
      `${output}.partial.json`,
      JSON.stringify({ etag: `"${sha(before)}"`, total: before.length, digestHex: sha(before) }),
    );
    const asked: Array<{ range?: string | undefined; ifRange?: string | undefined }> = [];
    const mirror = await listen((req, res) => {
      asked.push({ range: req.headers.range, ifRange: req.headers['if-range'] as string | undefined });
      serveIgnoringIfRange(res, req, after);
    });
    try {
      const result = await download({ url: `${mirror.url}/f/content`, output, sleep: async () => {} });
      expect(result.sha256).toBe(sha(after));
      expect(sha(await readFile(output))).toBe(sha(after));
      expect(existsSync(`${output}.partial`)).toBe(false);
      // It did try to resume the old bytes, then fetched the new representation whole.
      expect(asked[0]).toEqual({ range: `bytes=${before.length / 2}-`, ifRange: `"${sha(before)}"` });
      expect(asked.at(-1)?.range).toBeUndefined();
    } finally {
      await mirror.close();
    }
  });
});

describe('arkvory get against a mirror whose body runs past what its headers say', () => {
  it('refuses a chunked 206 longer than its Content-Range as protocol, writing none of the excess', async () => {
    const body = Buffer.alloc(64 * 1024, 3);
    const half = body.length / 2;
    const output = path.join(dir, 'overlong.bin');
    await writeFile(`${output}.partial`, body.subarray(0, half));
    await writeFile(
      `${output}.partial.json`,
      JSON.stringify({ etag: `"${sha(body)}"`, total: body.length, digestHex: sha(body) }),
    );
    // It says the 206 holds 10 bytes and sends, chunked (no Content-Length stops it), 16 KiB of others.
    const mirror = await listen((_req, res) => {
      res.writeHead(206, {
        etag: `"${sha(body)}"`,
        'repr-digest': reprDigest(body),
        'content-range': `bytes ${half}-${half + 9}/${body.length}`,
      });
      res.end(Buffer.alloc(16 * 1024, 0xee));
    });
    try {
      const error = await download({ url: `${mirror.url}/f/content`, output, sleep: async () => {} }).catch(
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: 'protocol', status: 206 });
      expect((error as Error).message).toBe(
        `The 206's body runs past byte ${half + 10}, where its Content-Range ends it.`,
      );
    } finally {
      await mirror.close();
    }
    expect(existsSync(output)).toBe(false);
    expect((await readFile(`${output}.partial`)).equals(body.subarray(0, half))).toBe(true);
  });
});

describe('a key no header can carry (a zero-width space pasted along with it)', () => {
  it('is invalid_argument at once, for download and upload alike: no request, no retry, not quoted', async () => {
    let asked = 0;
    const server = await listen((_req, res) => {
      asked++;
      res.writeHead(503).end();
    });
    const key = `ark_${'a'.repeat(16)}_\u200b${'B'.repeat(42)}`;
    let slept = 0;
    const sleep = async () => {
      slept++;
    };
    const file = path.join(dir, 'to-upload.bin');
    await writeFile(file, 'bytes');
    try {
      for (const attempt of [
        () => download({ url: `${server.url}/f/content`, output: path.join(dir, 'pasted.bin'), key, sleep }),
        () => upload({ file, url: `${server.url}/f`, key, sleep }),
      ]) {
        const error = await attempt().catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'invalid_argument' });
        expect((error as Error).message).not.toContain('B'.repeat(42));
      }
      expect(asked).toBe(0);
      expect(slept).toBe(0);
    } finally {
      await server.close();
    }
  });
});
