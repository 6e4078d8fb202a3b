/**
 * The resuming client (SDK and `arkvory get`) against real gateways: it waits out a 429 `busy`,
 * refuses a file that does not match the published digest, resumes after the CLI itself was
 * killed, fetches a pre-signed link made by `arkvory presign` (also read with `--link-file`, and made
 * through an nginx that publishes the gateway under a path prefix), keeps the mode and owner of a
 * file it replaces, and — in the shared profile with a router in front of a writer and a reader —
 * survives the gateway serving it being killed, both through the router and through `--mirror`.
 * Every download is compared byte for byte.
 */
import { spawn } from 'node:child_process';
import { constants, existsSync, statSync } from 'node:fs';
import { chmod, chown, mkdtemp, open, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../test/support/database.ts';
import { CLI, ROOT, makeTempDir, runCli, startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { startHeaderLoggingProxy } from '../test/support/header-logging-proxy.ts';
import { ArkvoryClientError, download, presign, upload } from './index.ts';
import { freeLoopbackPort } from '../test/harness/index.ts';

const MiB = 1024 * 1024;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-get-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function put(gw: GatewayProcess, key: string, p: string, body: Buffer): Promise<void> {
  const res = await request(`${gw.url}${p}`, {
    method: 'PUT',
    headers: { ...bearer(key), 'content-digest': contentDigest(body) },
    body,
  });
  expect(res.status, res.body.toString()).toBe(201);
}

describe('arkvory get against one gateway', () => {
  let db: TestDatabase & { drop(): Promise<void> };
  let gw: GatewayProcess;
  let key: string;
  const file = randomContent(6 * MiB + 777);
  const target = '/api/v1/repositories/dl/artifacts/file.bin';

  beforeAll(async () => {
    db = await createTestDatabase();
    await createRepository(db.pool, 'dl');
    ({ key } = await createServiceAccount(db.pool, { grants: { dl: 'write' } }));
    // One download per principal at a time and no queue: a second one is 429 busy (Retry-After: 1).
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '1',
        ARKVORY_ADMISSION_QUEUE_LENGTH: '0',
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(4 * MiB),
      },
      timeoutMs: 60_000,
    });
    await put(gw, key, target, file);
  });
  afterAll(async () => {
    await gw?.stop();
    await db?.drop();
  });

  it('waits Retry-After on a 429 and then downloads the exact bytes', async () => {
    // A download of the same principal holds the only slot for about 1.5 s.
    const blocker = new Promise<number>((resolve, reject) => {
      http
        .get(`${gw.url}${target}/content`, { headers: bearer(key), agent: false }, (res) => {
          let n = 0;
          res.on('data', (c: Buffer) => (n += c.length));
          res.on('end', () => resolve(n));
        })
        .on('error', reject);
    });
    await sleep(300);
    const waits: number[] = [];
    const output = path.join(dir, 'after-429.bin');
    const result = await download({
      url: `${gw.url}${target}/content`,
      output,
      key,
      sleep: async (ms) => (waits.push(ms), sleep(ms)),
    });
    expect(await blocker).toBe(file.length);
    expect(waits[0]).toBe(1000);
    expect(result.attempts).toBeGreaterThanOrEqual(2);
    expect(sha256(await readFile(output))).toBe(sha256(file));
    expect(existsSync(`${output}.partial`)).toBe(false);
    expect(
      gw
        .logLines()
        .some(
          (l) =>
            l.msg === 'request' && l.status === 429 && l.route === '/api/v1/repositories/:repo/artifacts/:id/content',
        ),
    ).toBe(true);
  });

  it("charges a pre-signed link to its principal: it holds that principal's only download slot", async () => {
    const made = await runCli(['presign', 'dl', 'file.bin'], { ARKVORY_URL: gw.url, ARKVORY_KEY: key });
    expect(made.code, made.stderr).toBe(0);
    const link = (JSON.parse(made.stdout) as { url: string }).url;
    const viaLink = new Promise<number>((resolve, reject) => {
      http
        .get(link, { agent: false }, (res) => {
          let n = 0;
          res.on('data', (c: Buffer) => (n += c.length));
          res.on('end', () => resolve(n));
        })
        .on('error', reject);
    });
    await sleep(300);
    const refused = await request(`${gw.url}${target}/content`, { headers: bearer(key) });
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body.toString()).code).toBe('busy');
    expect(refused.headers['retry-after']).toBe('1');
    expect(await viaLink).toBe(file.length);
  });

  it('stops a download when its AbortSignal fires, with the code `aborted`', async () => {
    const controller = new AbortController();
    const output = path.join(dir, 'aborted.bin');
    const error = await download({
      url: `${gw.url}${target}/content`,
      output,
      key,
      signal: controller.signal,
      progressIntervalMs: 0,
      onProgress: (p) => p.bytes > 0 && controller.abort(),
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'aborted' });
    expect(existsSync(output)).toBe(false);
  });

  it('never leaves a file that does not match the published digest under the final name', async () => {
    // Larger than the gateway's small-blob cache keeps (256 KiB): those are verified when loaded and
    // answered 500, so only a streamed blob reaches the client damaged.
    const bad = randomContent(600_000);
    await put(gw, key, '/api/v1/repositories/dl/artifacts/rotten.bin', bad);
    // Flip one byte of the stored blob behind the gateway's back (same size, so it still serves it).
    const hex = sha256(bad);
    const blob = path.join(gw.dataDir, 'blobs', 'sha256', hex.slice(0, 2), hex.slice(2, 4), hex);
    const handle = await open(blob, 'r+');
    await handle.write(Buffer.from([bad[1000]! ^ 0xff]), 0, 1, 1000);
    await handle.close();
    const output = path.join(dir, 'rotten.bin');
    const error = await download({
      url: `${gw.url}/api/v1/repositories/dl/artifacts/rotten.bin/content`,
      output,
      key,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ArkvoryClientError);
    expect((error as ArkvoryClientError).code).toBe('digest_mismatch');
    expect(existsSync(output)).toBe(false);
    expect(existsSync(`${output}.partial`)).toBe(false);
  });

  it('asks the gateway before taking a whole partial file from a killed run: the name may hold other bytes now', async () => {
    const name = '/api/v1/repositories/dl/artifacts/replaced.bin';
    const before = randomContent(64 * 1024);
    const after = randomContent(64 * 1024);
    await put(gw, key, name, before);
    const output = path.join(dir, 'replaced.bin');
    // An earlier run got every byte and was killed before its rename.
    const leftBehind = async () => {
      await writeFile(`${output}.partial`, before);
      await writeFile(
        `${output}.partial.json`,
        JSON.stringify({ etag: `"${sha256(before)}"`, total: before.length, digestHex: sha256(before) }),
      );
    };
    await leftBehind();
    // Unchanged: the gateway's 416 to the resume says the bytes held are the whole; none is sent again.
    const kept = await download({ url: `${gw.url}${name}/content`, output, key });
    expect(kept).toMatchObject({ sha256: sha256(before), attempts: 1 });
    expect(sha256(await readFile(output))).toBe(sha256(before));

    await leftBehind();
    expect((await request(`${gw.url}${name}`, { method: 'DELETE', headers: bearer(key) })).status).toBe(204);
    await put(gw, key, name, after);
    const fetched = await download({ url: `${gw.url}${name}/content`, output, key });
    expect(fetched.sha256).toBe(sha256(after));
    expect(sha256(await readFile(output))).toBe(sha256(after));
    expect(existsSync(`${output}.partial`)).toBe(false);
    expect(existsSync(`${output}.partial.json`)).toBe(false);
  });

  it('starting over after the object changed, never leaves a state file naming the new bytes over the old ones', async () => {
    const name = '/api/v1/repositories/dl/artifacts/restarted.bin';
    const before = randomContent(64 * 1024);
    const after = randomContent(64 * 1024);
    const output = path.join(dir, 'restarted.bin');
    await put(gw, key, name, before);
    expect((await request(`${gw.url}${name}`, { method: 'DELETE', headers: bearer(key) })).status).toBe(204);
    await put(gw, key, name, after);
    const etagOf = (b: Buffer) => `"${sha256(b)}"`;
    // The run that starts over empties the partial file and writes the new state: one of those two
    // calls fails, which stands for the process dying between them (a file error ends the download).
    for (const step of ['the partial file emptied', 'the new state written'] as const) {
      // An earlier run, killed, holds half of the old bytes.
      await writeFile(`${output}.partial`, before.subarray(0, before.length / 2));
      await writeFile(
        `${output}.partial.json`,
        JSON.stringify({ etag: etagOf(before), total: before.length, digestHex: sha256(before) }),
      );
      const crash = Object.assign(new Error(`EIO: crashed at ${step}`), { code: 'EIO', syscall: 'write' });
      const files = {
        open: ((file, flags, mode) => {
          if (step === 'the partial file emptied' && typeof flags === 'number' && flags & constants.O_TRUNC)
            return Promise.reject(crash);
          return open(file, flags, mode);
        }) as typeof open,
        writeFile: ((file, data, options) => {
          if (step === 'the new state written' && String(file).endsWith('.partial.json')) return Promise.reject(crash);
          return writeFile(file, data, options);
        }) as typeof writeFile,
      };
      await expect(download({ url: `${gw.url}${name}/content`, output, key, files })).rejects.toBe(crash);
      // What the crash left: the partial file holds the start of the representation the state names.
      const state = JSON.parse(await readFile(`${output}.partial.json`, 'utf8')) as { etag: string };
      const held = await readFile(`${output}.partial`);
      const named = state.etag === etagOf(after) ? after : before;
      expect(named.subarray(0, held.length).equals(held), `after a crash at ${step}`).toBe(true);
      // The next run gets the new bytes.
      const got = await download({ url: `${gw.url}${name}/content`, output, key });
      expect(got.sha256).toBe(sha256(after));
      expect(sha256(await readFile(output))).toBe(sha256(after));
    }
  });

  it('flushes the whole file to disk before the rename gives it the final name, and the directory after', async () => {
    const name = '/api/v1/repositories/dl/artifacts/flushed.bin';
    const body = randomContent(48 * 1024);
    await put(gw, key, name, body);
    const output = path.join(dir, 'flushed.bin');
    const synced: Array<{ file: string; size: number; named: boolean }> = [];
    const files = {
      open: (async (file, flags, mode) => {
        const handle = await open(file, flags, mode);
        const sync = handle.sync.bind(handle);
        handle.sync = async () => {
          await sync();
          synced.push({ file: String(file), size: (await handle.stat()).size, named: existsSync(output) });
        };
        return handle;
      }) as typeof open,
      writeFile,
    };
    await download({ url: `${gw.url}${name}/content`, output, key, files });
    expect(sha256(await readFile(output))).toBe(sha256(body));
    expect(synced.map(({ file, named }) => [path.relative(dir, file) || '.', named])).toEqual([
      ['flushed.bin.partial', false],
      ['.', true],
    ]);
    expect(synced[0]!.size).toBe(body.length);
  });

  it('refuses a 206 whose Content-Range is not the range asked (a proxy rewrote it) as protocol, unread, the partial kept', async () => {
    const name = '/api/v1/repositories/dl/artifacts/ranged.bin';
    const body = randomContent(64 * 1024);
    await put(gw, key, name, body);
    const half = body.length / 2;
    // A real nginx in front of the gateway that answers every range as if it started at 0.
    const proxy = await startHeaderLoggingProxy(gw.url, {
      locationDirectives: `proxy_hide_header Content-Range; add_header Content-Range "bytes 0-${body.length - 1}/${body.length}";`,
    });
    const output = path.join(dir, 'ranged.bin');
    await writeFile(`${output}.partial`, body.subarray(0, half));
    await writeFile(
      `${output}.partial.json`,
      JSON.stringify({ etag: `"${sha256(body)}"`, total: body.length, digestHex: sha256(body) }),
    );
    try {
      const error = await download({ url: `${proxy.url}${name}/content`, output, key }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'protocol', status: 206 });
      expect((error as Error).message).toBe(
        `The 206's Content-Range (bytes 0-${body.length - 1}/${body.length}) does not start at byte ${half}, which was asked for.`,
      );
      expect((await proxy.requests()).filter((r) => r.request.includes('/content')).map((r) => r.status)).toEqual([
        206,
      ]);
    } finally {
      await proxy.stop();
    }
    expect(existsSync(output)).toBe(false);
    expect((await readFile(`${output}.partial`)).equals(body.subarray(0, half))).toBe(true);
    // The gateway itself resumes it.
    const got = await download({ url: `${gw.url}${name}/content`, output, key });
    expect(got).toMatchObject({ sha256: sha256(body), resumes: 1 });
    expect(sha256(await readFile(output))).toBe(sha256(body));
  });

  it('starts over, never appends, when a proxy drops the Range of a resume and the gateway answers 200', async () => {
    const name = '/api/v1/repositories/dl/artifacts/unranged.bin';
    const body = randomContent(64 * 1024);
    await put(gw, key, name, body);
    const half = body.length / 2;
    // A real nginx in front of the gateway that passes no Range on: every answer is the whole, 200.
    const proxy = await startHeaderLoggingProxy(gw.url, { locationDirectives: 'proxy_set_header Range "";' });
    const output = path.join(dir, 'unranged.bin');
    await writeFile(`${output}.partial`, body.subarray(0, half));
    await writeFile(
      `${output}.partial.json`,
      JSON.stringify({ etag: `"${sha256(body)}"`, total: body.length, digestHex: sha256(body) }),
    );
    try {
      const got = await download({ url: `${proxy.url}${name}/content`, output, key });
      expect(got).toMatchObject({ bytes: body.length, sha256: sha256(body), resumes: 1, attempts: 1 });
      // Logged as nginx finishes the answer, which may be just after the client has the last byte.
      await expect
        .poll(async () => (await proxy.requests()).filter((r) => r.request.includes('/content')).map((r) => r.status))
        .toEqual([200]);
    } finally {
      await proxy.stop();
    }
    expect((await readFile(output)).equals(body)).toBe(true);
    expect(existsSync(`${output}.partial.json`)).toBe(false);
  });

  it('reads no more than 64 KiB of an error answer, however long (a proxy answers 404 with a 256 MiB body)', async () => {
    const name = '/api/v1/repositories/dl/artifacts/absent.bin';
    // A real nginx in front of the gateway that answers its 404 with a huge file (sparse: no disk).
    const pages = await makeTempDir('arkvory-error-page-');
    const page = await open(path.join(pages, 'error.bin'), 'w');
    await page.truncate(256 * MiB);
    await page.close();
    const proxy = await startHeaderLoggingProxy(gw.url, {
      locationDirectives: `proxy_intercept_errors on; error_page 404 =404 /error.bin; location = /error.bin { internal; root ${pages}; }`,
    });
    try {
      const error = await download({
        url: `${proxy.url}${name}/content`,
        output: path.join(dir, 'absent.bin'),
        key,
      }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'http_404', status: 404 });
      // The client's other calls read their error answers the same way.
      const linkError = await presign({ url: `${proxy.url}${name}`, key }).catch((e: unknown) => e);
      expect(linkError).toMatchObject({ status: 404 });
      const file = path.join(dir, 'to-nowhere.bin');
      await writeFile(file, 'bytes');
      const upError = await upload({
        file,
        url: `${proxy.url}/api/v1/repositories/no-such-repository/artifacts/x.bin`,
        key,
      }).catch((e: unknown) => e);
      expect(upError).toMatchObject({ status: 404 });
      await proxy.stop();
      const logged = await proxy.requests();
      for (const route of ['/content', '/presign', '/no-such-repository/']) {
        const [asked] = logged.filter((r) => r.request.includes(route));
        expect(asked?.status).toBe(404);
        // Socket buffers take some megabytes after the client stops reading; the whole was 256 MiB.
        expect(asked!.bodyBytesSent).toBeLessThan(64 * MiB);
      }
    } finally {
      await proxy.stop();
      await rm(pages, { recursive: true, force: true });
    }
  });

  it('one run at a time per output: a lock held by a live process refuses it (its partial file untouched), a dead one is taken over', async () => {
    const name = '/api/v1/repositories/dl/artifacts/locked.bin';
    const body = randomContent(32 * 1024);
    await put(gw, key, name, body);
    const output = path.join(dir, 'locked.bin');
    const lock = `${output}.partial.lock`;
    await writeFile(`${output}.partial`, body.subarray(0, 1000));
    await writeFile(
      `${output}.partial.json`,
      JSON.stringify({ etag: `"${sha256(body)}"`, total: body.length, digestHex: sha256(body) }),
    );
    // Another run, alive (this test's own process), holds the output.
    await writeFile(lock, JSON.stringify({ pid: process.pid, host: os.hostname() }));
    const error = await download({ url: `${gw.url}${name}/content`, output, key }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'target_locked' });
    expect(existsSync(output)).toBe(false);
    expect((await readFile(`${output}.partial`)).length).toBe(1000);
    expect(existsSync(lock)).toBe(true);
    const cli = await runCli(['get', 'dl/locked.bin', '-o', output], { ARKVORY_URL: gw.url, ARKVORY_KEY: key });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(/^arkvory: target_locked: Another download to this file is running \(process \d+ on /);
    expect((await readFile(`${output}.partial`)).length).toBe(1000);

    // A run killed while it held the lock: its process is gone, so the lock is taken over and released.
    const dead = spawn(process.execPath, ['-e', '']);
    await new Promise((resolve) => dead.once('exit', resolve));
    await writeFile(lock, JSON.stringify({ pid: dead.pid, host: os.hostname() }));
    const got = await download({ url: `${gw.url}${name}/content`, output, key });
    expect(got).toMatchObject({ sha256: sha256(body), resumes: 1 });
    expect(sha256(await readFile(output))).toBe(sha256(body));
    expect(existsSync(lock)).toBe(false);
  });

  it('never writes through a symlink planted at its partial file or its state file', async () => {
    const name = '/api/v1/repositories/dl/artifacts/planted.bin';
    const body = randomContent(32 * 1024);
    await put(gw, key, name, body);
    // Someone who may write the output's directory (a shared one) points both names at files of ours.
    const victims = { partial: path.join(dir, 'victim-a.txt'), state: path.join(dir, 'victim-b.txt') };
    await writeFile(victims.partial, 'precious a\n');
    await writeFile(victims.state, 'precious b\n');
    const output = path.join(dir, 'planted.bin');
    await symlink(victims.partial, `${output}.partial`);
    await symlink(victims.state, `${output}.partial.json`);
    const got = await download({ url: `${gw.url}${name}/content`, output, key });
    expect(got.sha256).toBe(sha256(body));
    expect(sha256(await readFile(output))).toBe(sha256(body));
    expect(await readFile(victims.partial, 'utf8')).toBe('precious a\n');
    expect(await readFile(victims.state, 'utf8')).toBe('precious b\n');

    // A state file of the right shape beside the planted link: the resume still starts a file of its own.
    await rm(output);
    await writeFile(`${output}.partial.json`, JSON.stringify({ etag: '"x"', total: body.length, digestHex: null }));
    await symlink(victims.partial, `${output}.partial`);
    await download({ url: `${gw.url}${name}/content`, output, key });
    expect(sha256(await readFile(output))).toBe(sha256(body));
    expect(await readFile(victims.partial, 'utf8')).toBe('precious a\n');
  });

  it('carries the gateway code in its errors', async () => {
    const error = await download({
      url: `${gw.url}/api/v1/repositories/dl/artifacts/none/content`,
      output: path.join(dir, 'none.bin'),
      key,
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'not_found', status: 404 });
    const denied = await download({
      url: `${gw.url}${target}/content`,
      output: path.join(dir, 'denied.bin'),
      key: `ark_${'a'.repeat(16)}_${'B'.repeat(43)}`,
    }).catch((e: unknown) => e);
    expect(denied).toMatchObject({ code: 'unauthorized', status: 401 });
  });

  it('resumes after `arkvory get` itself was killed, with JSON progress lines when not on a terminal', async () => {
    const output = path.join(dir, 'killed.bin');
    const env = { ARKVORY_URL: gw.url, ARKVORY_KEY: key };
    const child = spawn(process.execPath, [CLI, 'get', 'dl/file.bin', '-o', output], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise((resolve) => child.on('exit', resolve));
    const deadline = Date.now() + 30_000;
    while (((await stat(`${output}.partial`).catch(() => undefined))?.size ?? 0) < MiB) {
      if (Date.now() > deadline) throw new Error(`no partial file appeared:\n${stderr}`);
      await sleep(50);
    }
    child.kill('SIGKILL');
    await exited;
    const partial = (await stat(`${output}.partial`)).size;
    expect(partial).toBeLessThan(file.length);
    expect(existsSync(output)).toBe(false);
    const resumed = await runCli(['get', 'dl/file.bin', '-o', output], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    const result = JSON.parse(resumed.stdout) as { resumes: number; bytes: number; sha256: string };
    expect(result.resumes).toBeGreaterThanOrEqual(1);
    expect(result.sha256).toBe(sha256(file));
    expect(sha256(await readFile(output))).toBe(sha256(file));
    const lines = resumed.stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; bytes: number; total: number });
    expect(lines.at(-1)).toMatchObject({ event: 'done', bytes: file.length, total: file.length });
    // The resumed run asked only for the rest: 206 from the offset it held.
    // Logged when the response closes, possibly just after the CLI exits: polled, as below.
    await expect.poll(() => gw.logLines().some((l) => l.msg === 'request' && l.status === 206)).toBe(true);
  });

  it('`--mirror`: a refused first gateway sends the CLI to the mirror; on a terminal it draws a bar with rate and ETA', async () => {
    const output = path.join(dir, 'mirrored.bin');
    const dead = `http://127.0.0.1:${await freeLoopbackPort()}`;
    const got = await runCli(
      ['get', `${dead}${target}/content`, '--mirror', 'http://127.0.0.1:9', '--mirror', gw.url, '-o', output],
      { ARKVORY_KEY: key },
    );
    expect(got.code, got.stderr).toBe(0);
    expect(sha256(await readFile(output))).toBe(sha256(file));
    // A pseudo-terminal (util-linux `script`): the progress is one redrawn bar, not JSON lines.
    const tty = path.join(dir, 'tty.bin');
    const command = [process.execPath, CLI, 'get', 'dl/file.bin', '-o', tty].map((a) => `'${a}'`).join(' ');
    const drawn = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
      const child = spawn('script', ['-qfec', command, '/dev/null'], {
        env: { PATH: process.env.PATH, HOME: process.env.HOME, TERM: 'dumb', ARKVORY_URL: gw.url, ARKVORY_KEY: key },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, out }));
    });
    expect(drawn.code, drawn.out).toBe(0);
    expect(drawn.out).toMatch(/\r\[#+\.*\] +\d+% [\d.]+ \w+\/6\.0 MiB [\d.]+ \w+\/s ETA \d\d:\d\d/);
    expect(drawn.out).toContain('100%');
    expect(drawn.out).not.toContain('"event"');
    expect(sha256(await readFile(tty))).toBe(sha256(file));
  });

  it('fetches a link made by `arkvory presign` with no key', async () => {
    const made = await runCli(['presign', 'dl', 'file.bin', '--expires', '10m'], {
      ARKVORY_URL: gw.url,
      ARKVORY_KEY: key,
    });
    expect(made.code, made.stderr).toBe(0);
    const link = JSON.parse(made.stdout) as { url: string; expiresAt: string; methods: string[] };
    expect(link.methods).toEqual(['GET', 'HEAD']);
    expect(Date.parse(link.expiresAt) - Date.now()).toBeLessThanOrEqual(600_000);
    const output = path.join(dir, 'linked.bin');
    const got = await runCli(['get', link.url, '-o', output], {});
    expect(got.code, got.stderr).toBe(0);
    expect(sha256(await readFile(output))).toBe(sha256(file));
    expect(got.stderr).not.toContain('X-Arkvory-Signature');
    const refused = await runCli(['presign', 'dl', 'file.bin', '--expires', '30d'], {
      ARKVORY_URL: gw.url,
      ARKVORY_KEY: key,
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^arkvory: invalid_request: /);
  });

  it('`presign --url` under a path prefix (nginx strips it): the link keeps the prefix and verifies at the gateway', async () => {
    const name = '/api/v1/repositories/dl/artifacts/prefixed.bin';
    const body = randomContent(64 * 1024);
    await put(gw, key, name, body);
    const proxy = await startHeaderLoggingProxy(gw.url, { pathPrefix: '/arkvory/' });
    try {
      const made = await runCli(['presign', 'dl', 'prefixed.bin', '--expires', '10m'], {
        ARKVORY_URL: `${proxy.url}/arkvory/`,
        ARKVORY_KEY: key,
      });
      expect(made.code, made.stderr).toBe(0);
      const link = JSON.parse(made.stdout) as { url: string; path: string };
      // The signature binds the path the gateway sees, without the prefix; the link goes through it.
      expect(link.path).toMatch(/^\/api\/v1\/repositories\/dl\/artifacts\/prefixed\.bin\/content\?X-Arkvory-Key=/);
      expect(link.url).toBe(`${proxy.url}/arkvory${link.path}`);
      const output = path.join(dir, 'prefixed.bin');
      const got = await runCli(['get', '--link-file', '-', '-o', output], {}, `${link.url}\n`);
      expect(got.code, got.stderr).toBe(0);
      expect(sha256(await readFile(output))).toBe(sha256(body));
      // Through nginx under the prefix (its own readiness probe of `/` aside).
      const fetched = (await proxy.requests()).filter((r) => r.request.includes('/content'));
      expect(fetched.map((r) => [r.status, r.request.split('?')[0]])).toEqual([[200, `GET /arkvory${name}/content`]]);
    } finally {
      await proxy.stop();
    }
  });

  it('`--link-file`: reads the link from a file or standard input, off the command line; with no link or two, exit 2', async () => {
    const made = await runCli(['presign', 'dl', 'file.bin', '--expires', '10m'], {
      ARKVORY_URL: gw.url,
      ARKVORY_KEY: key,
    });
    expect(made.code, made.stderr).toBe(0);
    const link = (JSON.parse(made.stdout) as { url: string }).url;
    const fromStdin = path.join(dir, 'link-stdin.bin');
    const piped = await runCli(['get', '--link-file', '-', '-o', fromStdin], {}, `${link}\n`);
    expect(piped.code, piped.stderr).toBe(0);
    expect(sha256(await readFile(fromStdin))).toBe(sha256(file));
    // A file written on Windows (CRLF).
    const linkFile = path.join(dir, 'link.txt');
    await writeFile(linkFile, `  ${link}\r\n`, { mode: 0o600 });
    const fromFile = path.join(dir, 'link-file.bin');
    const named = await runCli(['get', '--link-file', linkFile, '-o', fromFile], {});
    expect(named.code, named.stderr).toBe(0);
    expect(sha256(await readFile(fromFile))).toBe(sha256(file));

    const twoLinks = await runCli(['get', '--link-file', '-', '-o', fromStdin], {}, `${link}\n${link}\n`);
    expect(twoLinks.code).toBe(2);
    expect(twoLinks.stderr).toMatch(/standard input holds 2 lines/);
    expect(twoLinks.stderr).not.toContain('X-Arkvory-Signature');
    const both = await runCli(['get', 'dl/file.bin', '--link-file', linkFile], { ARKVORY_URL: gw.url });
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/not both/);
    const none = await runCli(['get'], {});
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/missing <url.*--link-file FILE/);
  });

  it('keeps the permission bits and owner of a file it replaces; a new file gets the umask default', async () => {
    expect(process.getuid?.(), 'runs as root: it gives the replaced file to user nobody').toBe(0);
    const env = { ARKVORY_URL: gw.url, ARKVORY_KEY: key };
    const kept = path.join(dir, 'kept-private.bin');
    await writeFile(kept, 'old secret', { mode: 0o600 });
    await chmod(kept, 0o600);
    const shared = path.join(dir, 'kept-owner.bin');
    await writeFile(shared, 'old');
    await chown(shared, 65534, 65534);
    await chmod(shared, 0o640);
    for (const output of [kept, shared]) {
      const got = await runCli(['get', 'dl/file.bin', '-o', output], env);
      expect(got.code, got.stderr).toBe(0);
      expect(sha256(await readFile(output))).toBe(sha256(file));
    }
    expect((await stat(kept)).mode & 0o7777).toBe(0o600);
    expect(await stat(shared)).toMatchObject({ uid: 65534, gid: 65534 });
    expect((await stat(shared)).mode & 0o7777).toBe(0o640);
    // A new file: the mode any new file of this umask gets.
    const fresh = path.join(dir, 'fresh.bin');
    const reference = path.join(dir, 'reference');
    await writeFile(reference, '');
    const got = await runCli(['get', 'dl/file.bin', '-o', fresh], env);
    expect(got.code, got.stderr).toBe(0);
    expect((await stat(fresh)).mode & 0o7777).toBe((await stat(reference)).mode & 0o7777);
    expect((await stat(fresh)).uid).toBe(0);
  });

  /** `arkvory get dl/file.bin -o output` as user nobody, also in group `users` (100). */
  function getAsNobody(output: string): { exited: Promise<{ code: number | null; stderr: string }>; kill(): void } {
    const command = [process.execPath, CLI, 'get', 'dl/file.bin', '-o', output];
    const child = spawn(
      'setpriv',
      ['--reuid=65534', '--regid=65534', '--groups=65534,100', '--inh-caps=-all', '--', ...command],
      {
        env: { PATH: process.env.PATH, ARKVORY_URL: gw.url, ARKVORY_KEY: key },
        cwd: ROOT,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stderr }));
    });
    return { exited, kill: () => child.kill('SIGKILL') };
  }

  it('run by another user than the owner, keeps the group and bits of a file it replaces (only root gives a file away), and resumes over a read-only one', async () => {
    expect(process.getuid?.(), 'runs as root: it runs the CLI as user nobody with setpriv').toBe(0);
    // A directory of group `users` (100) that its members may write.
    const shared = await mkdtemp(path.join(os.tmpdir(), 'arkvory-get-shared-'));
    try {
      await chown(shared, 0, 100);
      await chmod(shared, 0o775);
      const team = path.join(shared, 'team.bin');
      await writeFile(team, 'old');
      await chown(team, 0, 100);
      await chmod(team, 0o664);
      const got = await getAsNobody(team).exited;
      expect(got.code, got.stderr).toBe(0);
      expect(sha256(await readFile(team))).toBe(sha256(file));
      expect(await stat(team)).toMatchObject({ uid: 65534, gid: 100 });
      expect((await stat(team)).mode & 0o7777).toBe(0o664);

      // A read-only file of nobody's: the partial file stays writable by its owner, so a run
      // killed midway resumes.
      const readOnly = path.join(shared, 'read-only.bin');
      await writeFile(readOnly, 'old');
      await chown(readOnly, 65534, 65534);
      await chmod(readOnly, 0o444);
      const killed = getAsNobody(readOnly);
      const deadline = Date.now() + 30_000;
      while (((await stat(`${readOnly}.partial`).catch(() => undefined))?.size ?? 0) < MiB) {
        if (Date.now() > deadline) throw new Error('no partial file appeared');
        await sleep(50);
      }
      killed.kill();
      await killed.exited;
      expect((await stat(`${readOnly}.partial`)).size).toBeLessThan(file.length);
      const resumed = await getAsNobody(readOnly).exited;
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(sha256(await readFile(readOnly))).toBe(sha256(file));
      expect((await stat(readOnly)).mode & 0o7777).toBe(0o444);
    } finally {
      await rm(shared, { recursive: true, force: true });
    }
  });

  it('writes the new bytes of a private file to a partial file no other user can read', async () => {
    const output = path.join(dir, 'private-partial.bin');
    await writeFile(output, 'old secret', { mode: 0o600 });
    await chmod(output, 0o600);
    const modes: number[] = [];
    await download({
      url: `${gw.url}${target}/content`,
      output,
      key,
      progressIntervalMs: 0,
      onProgress: (p) => {
        if (p.bytes >= MiB && !p.done) modes.push(statSync(`${output}.partial`).mode & 0o7777);
      },
    });
    expect(modes.length).toBeGreaterThan(0);
    expect(new Set(modes)).toEqual(new Set([0o600]));
    expect((await stat(output)).mode & 0o7777).toBe(0o600);
  });
});

describe('arkvory get with a link and ARKVORY_KEY set', () => {
  it('sends no key with a link: a link whose name now holds other bytes is refused, not answered by the key', async () => {
    const db = await createTestDatabase();
    try {
      await createRepository(db.pool, 'lk');
      const { key } = await createServiceAccount(db.pool, { grants: { lk: 'write' } });
      const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
      try {
        const name = '/api/v1/repositories/lk/artifacts/moving.bin';
        await put(gw, key, name, randomContent(1000));
        const made = await runCli(['presign', 'lk', 'moving.bin', '--expires', '10m'], {
          ARKVORY_URL: gw.url,
          ARKVORY_KEY: key,
        });
        expect(made.code, made.stderr).toBe(0);
        const link = (JSON.parse(made.stdout) as { url: string }).url;
        const deleted = await request(`${gw.url}${name}`, { method: 'DELETE', headers: bearer(key) });
        expect(deleted.status).toBe(204);
        await put(gw, key, name, randomContent(2000));
        const output = path.join(dir, 'moving.bin');
        const got = await runCli(['get', link, '-o', output], { ARKVORY_KEY: key });
        expect(got.code).not.toBe(0);
        expect(got.stderr).toMatch(/link_content_changed/);
        expect(existsSync(output)).toBe(false);
      } finally {
        await gw.stop();
      }
    } finally {
      await db.drop();
    }
  });
});

describe('arkvory get across a killed gateway (shared profile, router in front)', () => {
  const SLOTS = 2;
  /** 1 MiB/s per gateway: an 5 MiB download lasts about 5 s, long enough to kill its gateway. */
  const RATE = SLOTS * MiB;
  const file = randomContent(5 * MiB + 4321);
  const contentPath = '/api/v1/repositories/shared/artifacts/big.bin/content';
  let db: TestDatabase;
  let dataDir: string;
  let key: string;

  async function gatewayEnv(role: 'api' | 'reader', slot: number): Promise<Record<string, string>> {
    const port = await freeLoopbackPort();
    return {
      ARKVORY_PORT: String(port),
      ARKVORY_ADVERTISE_URL: `http://127.0.0.1:${port}`,
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_ROLE: role,
      ARKVORY_GATEWAY_SLOTS: String(SLOTS),
      ARKVORY_GATEWAY_SLOT: String(slot),
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(RATE),
    };
  }

  async function activeDownloads(gw: GatewayProcess): Promise<number> {
    const res = await request(`${gw.url}/health/ready`, { headers: bearer(key) }).catch(() => undefined);
    if (res?.status !== 200) return 0;
    return (JSON.parse(res.body.toString()) as { transfers: { downloads: { active: number } } }).transfers.downloads
      .active;
  }

  /** A fresh database and storage root, a writer and a reader on it, and the file published. */
  async function cluster(): Promise<{ writer: GatewayProcess; reader: GatewayProcess }> {
    const fresh = await createTestDatabase();
    databases.push(fresh);
    db = fresh;
    dataDir = await makeTempDir();
    await createRepository(db.pool, 'shared');
    ({ key } = await createServiceAccount(db.pool, { grants: { shared: 'write' } }));
    const writer = await startGateway({ env: await gatewayEnv('api', 0), dataDir, timeoutMs: 90_000 });
    const reader = await startGateway({ env: await gatewayEnv('reader', 1), dataDir, timeoutMs: 90_000 });
    await put(writer, key, '/api/v1/repositories/shared/artifacts/big.bin', file);
    return { writer, reader };
  }

  const partialSize = (output: string) => {
    try {
      return statSync(`${output}.partial`).size;
    } catch {
      return 0;
    }
  };

  /** Downloads `url` (plus mirrors); once 1 MiB is in, SIGKILLs whichever gateway is serving it. */
  async function downloadKillingServer(url: string, mirrors: string[], gateways: GatewayProcess[], output: string) {
    let killed: GatewayProcess | undefined;
    let killing: Promise<void> | undefined;
    const result = await download({
      url,
      mirrors,
      output,
      key,
      progressIntervalMs: 0,
      onProgress: (p) => {
        // Kill only once a MiB is on disk: bytes received but not yet written would be fetched again
        // from offset 0, which is a restart, not the resume this test is about.
        if (killing || p.bytes < MiB || partialSize(output) < MiB) return;
        killing = (async () => {
          for (const gw of gateways) {
            if ((await activeDownloads(gw)) > 0) {
              killed = gw;
              await gw.stop('SIGKILL');
              return;
            }
          }
        })();
      },
    });
    await killing;
    return { result, killed };
  }

  const databases: Array<{ drop(): Promise<void> }> = [];
  afterAll(async () => {
    for (const d of databases) await d.drop();
  });

  it('through the router: the serving gateway is SIGKILLed mid-download and the client resumes on the other', async () => {
    const { writer, reader } = await cluster();
    const router = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '300',
        ARKVORY_ROUTER_CONNECT_TIMEOUT_MILLISECONDS: '1000',
      },
      timeoutMs: 90_000,
    });
    // Both gateways in the router's pool before the download starts.
    const deadline = Date.now() + 20_000;
    while (
      (JSON.parse((await request(`${router.url}/health/status`)).body.toString()) as { backends: { healthy: number } })
        .backends.healthy < 2
    ) {
      if (Date.now() > deadline) throw new Error('router never saw both gateways');
      await sleep(100);
    }
    // A link made through the router (POST → the writer) works through the router (GET → any gateway).
    const made = await request(`${router.url}/api/v1/repositories/shared/artifacts/big.bin/presign`, {
      method: 'POST',
      headers: bearer(key),
    });
    expect(made.status, made.body.toString()).toBe(201);
    const link = JSON.parse(made.body.toString()) as { url: string; path: string };
    expect(link.url).toBe(`${router.url}${link.path}`);
    const head = await request(link.url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(file.length));
    for (const gw of [router, writer, reader])
      expect(gw.logs()).not.toContain(link.path.slice(link.path.indexOf('X-Arkvory-Signature=')));
    const output = path.join(dir, 'via-router.bin');
    const { result, killed } = await downloadKillingServer(`${router.url}${contentPath}`, [], [writer, reader], output);
    expect(killed, 'a gateway was serving the download and was killed').toBeDefined();
    expect(result.resumes).toBeGreaterThanOrEqual(1);
    expect(sha256(await readFile(output))).toBe(sha256(file));
    await router.stop();
    for (const gw of [writer, reader]) await gw.stop();
  });

  it('with --mirror: the first gateway is SIGKILLed mid-download and the client moves to the mirror', async () => {
    const { writer, reader } = await cluster();
    const output = path.join(dir, 'via-mirror.bin');
    const { result, killed } = await downloadKillingServer(
      `${reader.url}${contentPath}`,
      [writer.url],
      [reader],
      output,
    );
    expect(killed).toBe(reader);
    expect(result.resumes).toBeGreaterThanOrEqual(1);
    expect(sha256(await readFile(output))).toBe(sha256(file));
    // The writer logs a request when its response closes, which can be just after the client has
    // the last byte: poll the log instead of reading it once (CI once read it a moment too early).
    const resumedOnWriter = () =>
      writer
        .logLines()
        .filter(
          (l) =>
            l.msg === 'request' && l.route === '/api/v1/repositories/:repo/artifacts/:id/content' && l.status === 206,
        ).length;
    await expect.poll(resumedOnWriter, { timeout: 5000 }).toBeGreaterThanOrEqual(1);
    await writer.stop();
  });
});
