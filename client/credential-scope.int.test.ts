/**
 * Where `arkvory get` and `arkvory put` send ARKVORY_KEY: real CLI processes against plain HTTP
 * servers that record every request's Authorization. The key reaches the --url/ARKVORY_URL origin
 * and the --mirror origins only: a URL on any other origin (a link someone else handed over) is
 * fetched without credentials by `get`, refused by `put`, and a redirect is not followed to it.
 */
import http from 'node:http';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { makeTempDir, runCli } from '../test/support/gateway.ts';

const KEY = 'ark_abcdefgh_SECRETSECRETSECRET';
const BEARER = `Bearer ${KEY}`;

interface Seen {
  readonly method: string;
  readonly url: string;
  readonly authorization: string | undefined;
}

/** A server that records each request and answers with `answer` (default 404 `not_found`). */
class Capture {
  readonly seen: Seen[] = [];
  answer: (res: http.ServerResponse) => void = notFound;
  readonly #server = http.createServer((req, res) => {
    this.seen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization });
    req.resume();
    req.on('end', () => this.answer(res));
  });
  url = '';

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as { port: number }).port}`;
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  reset(): void {
    this.seen.length = 0;
    this.answer = notFound;
  }
}

function notFound(res: http.ServerResponse): void {
  res.writeHead(404, { 'content-type': 'application/json' }).end('{"code":"not_found","message":"no such object"}');
}

function answering(status: number, code: string): (res: http.ServerResponse) => void {
  return (res) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ code, message: code }));
}

const gateway = new Capture();
const mirror = new Capture();
const foreign = new Capture();
let dir: string;

beforeAll(async () => {
  await Promise.all([gateway.start(), mirror.start(), foreign.start()]);
  dir = await makeTempDir('arkvory-key-scope-');
});
afterAll(async () => {
  await Promise.all([gateway.stop(), mirror.stop(), foreign.stop()]);
});
beforeEach(() => {
  for (const c of [gateway, mirror, foreign]) c.reset();
});

const env = () => ({ ARKVORY_URL: gateway.url, ARKVORY_KEY: KEY, ARKVORY_UPLOAD_STATE_DIR: path.join(dir, 'state') });

describe('arkvory get', () => {
  it('sends no key to a URL on another origin, and says why when that origin asks for one', async () => {
    foreign.answer = answering(401, 'unauthorized');
    const got = await runCli(['get', `${foreign.url}/anything/evil.bin`, '-o', path.join(dir, 'evil.bin')], env());
    expect(foreign.seen).toEqual([{ method: 'GET', url: '/anything/evil.bin', authorization: undefined }]);
    expect(gateway.seen).toEqual([]);
    expect(got.code).toBe(1);
    expect(got.stderr).toContain(`arkvory: unauthorized: `);
    expect(got.stderr).toContain(`not to ${foreign.url}; if it is your gateway, give --url ${foreign.url}`);
    expect(got.stderr).not.toContain(KEY);
  });

  it('sends the key to the ARKVORY_URL origin, by short name and by a full URL spelled differently', async () => {
    const short = await runCli(['get', 'libs/app.bin', '-o', path.join(dir, 'a.bin')], env());
    expect(short.code).toBe(1);
    // Scheme in capitals, `localhost` would be another host: only the spelling changes.
    const full = gateway.url.replace('http://', 'HTTP://');
    const byUrl = await runCli(
      ['get', `${full}/api/v1/repositories/libs/artifacts/app.bin/content`, '-o', path.join(dir, 'b.bin')],
      {
        ...env(),
        ARKVORY_URL: `${gateway.url}/`,
      },
    );
    expect(byUrl.code).toBe(1);
    expect(gateway.seen.map((s) => s.authorization)).toEqual([BEARER, BEARER]);
    expect(gateway.seen.map((s) => s.url)).toEqual([
      '/api/v1/repositories/libs/artifacts/app.bin/content',
      '/api/v1/repositories/libs/artifacts/app.bin/content',
    ]);
  });

  it('sends the key to a --mirror origin but not to the foreign URL it moves away from', async () => {
    foreign.answer = answering(503, 'unavailable');
    const got = await runCli(
      [
        'get',
        `${foreign.url}/api/v1/repositories/libs/artifacts/app.bin/content`,
        '--mirror',
        mirror.url,
        '-o',
        path.join(dir, 'm.bin'),
      ],
      env(),
    );
    expect(got.code).toBe(1);
    expect(foreign.seen.map((s) => s.authorization)).toEqual([undefined]);
    expect(mirror.seen).toEqual([
      { method: 'GET', url: '/api/v1/repositories/libs/artifacts/app.bin/content', authorization: BEARER },
    ]);
    expect(gateway.seen).toEqual([]);
  });

  it('does not follow a redirect from the gateway to another origin', async () => {
    gateway.answer = (res) => res.writeHead(302, { location: `${foreign.url}/stolen` }).end();
    const got = await runCli(['get', 'libs/app.bin', '-o', path.join(dir, 'r.bin')], env());
    expect(got.code).toBe(1);
    expect(got.stderr).toMatch(/^arkvory: http_302: /);
    expect(gateway.seen.map((s) => s.authorization)).toEqual([BEARER]);
    expect(foreign.seen).toEqual([]);
  });
});

describe('arkvory put', () => {
  it('refuses a URL on another origin without sending anything there', async () => {
    const file = path.join(dir, 'up.bin');
    await writeFile(file, 'some bytes');
    const got = await runCli(['put', file, `${foreign.url}/api/v1/repositories/libs/artifacts/up.bin`], env());
    expect(got.code).toBe(2);
    expect(got.stderr).toContain(`not to ${foreign.url}; if it is your gateway, give --url ${foreign.url}`);
    expect(foreign.seen).toEqual([]);
    // Without a gateway named at all, a full URL is refused the same way.
    const unnamed = await runCli(['put', file, `${foreign.url}/api/v1/repositories/libs/artifacts/up.bin`], {
      ...env(),
      ARKVORY_URL: undefined,
    });
    expect(unnamed.code).toBe(2);
    expect(foreign.seen).toEqual([]);
  });

  it('sends the key to the ARKVORY_URL origin, by short name and by full URL', async () => {
    const file = path.join(dir, 'up.bin');
    await writeFile(file, 'some bytes');
    expect((await runCli(['put', file, 'libs/up.bin'], env())).code).toBe(1);
    expect((await runCli(['put', file, `${gateway.url}/api/v1/repositories/libs/artifacts/up.bin`], env())).code).toBe(
      1,
    );
    expect(gateway.seen).toEqual([
      { method: 'PUT', url: '/api/v1/repositories/libs/artifacts/up.bin', authorization: BEARER },
      { method: 'PUT', url: '/api/v1/repositories/libs/artifacts/up.bin', authorization: BEARER },
    ]);
  });
});
