/**
 * `arkvory get` and the local files it writes, against a real gateway: a full disk (a real, small
 * tmpfs) is `no_space` with the bytes kept for a resume, and never an uncaught exception; a
 * directory at any name it writes is `output_is_directory` before any byte is fetched; the modes of
 * the files it creates follow the umask as any new file's do, the state file kept private; and a
 * SIGINT leaves a partial file that the next run resumes.
 */
import { execFile, spawn } from 'node:child_process';
import { constants, existsSync } from 'node:fs';
import { mkdir, open, readFile, rm, stat, statfs, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../test/support/database.ts';
import { CLI, ROOT, makeTempDir, runCli, startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { download } from './index.ts';

const exec = promisify(execFile);
const KiB = 1024;
const PAGE = 4096;
const CONTENT = '/api/v1/repositories/lf/artifacts';

describe('arkvory get and its local files', () => {
  let db: TestDatabase & { drop(): Promise<void> };
  let gw: GatewayProcess;
  let key: string;
  let env: Record<string, string>;
  const small = randomContent(KiB);
  const big = randomContent(256 * KiB);
  /** Slow enough (1 MiB/s) to act on a download while it runs. */
  const slow = randomContent(512 * KiB);

  beforeAll(async () => {
    db = await createTestDatabase();
    await createRepository(db.pool, 'lf');
    ({ key } = await createServiceAccount(db.pool, { grants: { lf: 'write' } }));
    gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(1024 * KiB) },
      timeoutMs: 60_000,
    });
    env = { ARKVORY_URL: gw.url, ARKVORY_KEY: key };
    for (const [name, body] of [
      ['small.bin', small],
      ['big.bin', big],
      ['slow.bin', slow],
    ] as const) {
      const res = await request(`${gw.url}/api/v1/repositories/lf/artifacts/${name}`, {
        method: 'PUT',
        headers: { ...bearer(key), 'content-digest': contentDigest(body) },
        body,
      });
      expect(res.status, res.body.toString()).toBe(201);
    }
  });
  afterAll(async () => {
    await gw?.stop();
    await db?.drop();
  });

  /** Content requests the gateway has logged (one test at a time fetches). */
  const fetches = () =>
    gw.logLines().filter((l) => l.msg === 'request' && l.route === '/api/v1/repositories/:repo/artifacts/:id/content')
      .length;

  /** A real 512 KiB tmpfs, unmounted when the test ends, and a file filling it up to `free` bytes. */
  async function fullDisk(free: number): Promise<{ dir: string; filler: string }> {
    const dir = await makeTempDir('arkvory-get-tmpfs-');
    await exec('mount', ['-t', 'tmpfs', '-o', 'size=512k,mode=0755', 'tmpfs', dir]);
    onTestFinished(() => exec('umount', ['-l', dir]).then(() => undefined));
    const filler = path.join(dir, 'filler');
    const { bavail, bsize } = await statfs(dir);
    await writeFile(filler, Buffer.alloc(bavail * bsize - free));
    expect((await statfs(dir)).bavail * (await statfs(dir)).bsize).toBe(free);
    return { dir, filler };
  }

  it('a disk that fills as the state file is written: no_space, one line, no uncaught exception', async () => {
    // One page left: the lock takes it, so the partial file opens (empty) and the state file fails.
    const { dir } = await fullDisk(PAGE);
    const output = path.join(dir, 'small.bin');
    const got = await runCli(['get', 'lf/small.bin', '-o', output], env);
    expect(got.code).toBe(1);
    // The body, received whole and then dropped, once ended in an 'error' nobody heard: a crash
    // with its stack after the error line.
    expect(got.stderr).toBe(
      `arkvory: no_space: No space left to write ${output}.partial (the disk is full); the bytes written so far are kept: free some space and run the download again to resume it.\n`,
    );
    expect(existsSync(output)).toBe(false);
    expect(existsSync(`${output}.partial.lock`)).toBe(false);
  });

  it('a disk that fills mid-body: no_space at once, and the next run resumes the bytes written', async () => {
    // Room for the lock, the state file and 128 KiB of the 256 KiB.
    const { dir, filler } = await fullDisk(2 * PAGE + 128 * KiB);
    const output = path.join(dir, 'big.bin');
    const before = fetches();
    const full = await runCli(['get', 'lf/big.bin', '-o', output], env);
    expect(full.code).toBe(1);
    expect(full.stderr.trim().split('\n').at(-1)).toMatch(
      /^arkvory: no_space: No space left to write .*big\.bin\.partial \(the disk is full\)/,
    );
    // A full disk is not a failed gateway: it is not retried (it was 12 attempts, then gave_up).
    await expect.poll(() => fetches() - before).toBe(1);
    const held = (await stat(`${output}.partial`)).size;
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThan(big.length);
    expect((await readFile(`${output}.partial`)).equals(big.subarray(0, held))).toBe(true);
    expect(JSON.parse(await readFile(`${output}.partial.json`, 'utf8'))).toMatchObject({ etag: `"${sha256(big)}"` });

    await rm(filler);
    const resumed = await runCli(['get', 'lf/big.bin', '-o', output], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({ resumes: 1, sha256: sha256(big) });
    expect(sha256(await readFile(output))).toBe(sha256(big));
  });

  it.each(['', '.partial', '.partial.json', '.partial.lock'])(
    'a directory at <output>%s: output_is_directory before any byte is fetched',
    async (suffix) => {
      const dir = await makeTempDir('arkvory-get-dirs-');
      const output = path.join(dir, 'small.bin');
      await mkdir(`${output}${suffix}`);
      const before = fetches();
      const got = await runCli(['get', 'lf/small.bin', '-o', output], env);
      expect(got.code).toBe(1);
      expect(got.stderr).toBe(
        `arkvory: output_is_directory: ${output}${suffix} is a directory, where the download writes a file: remove it, or write to another file.\n`,
      );
      expect(fetches()).toBe(before);
      expect((await stat(`${output}${suffix}`)).isDirectory()).toBe(true);
    },
  );

  it('a FIFO planted at <output>.partial.lock is target_locked at once, never a read that blocks for good', async () => {
    const dir = await makeTempDir('arkvory-get-fifo-');
    const output = path.join(dir, 'small.bin');
    const lock = `${output}.partial.lock`;
    await exec('mkfifo', [lock]);
    const attempt = download({ url: `${gw.url}${CONTENT}/small.bin/content`, output, key }).catch((e: unknown) => e);
    const got = await Promise.race([attempt, sleep(1500).then(() => 'still waiting on the FIFO after 1.5 s')]);
    if (typeof got === 'string') {
      // A writer that opens and closes the FIFO ends the read, so this test ends either way.
      await (await open(lock, constants.O_WRONLY | constants.O_NONBLOCK)).close();
      await attempt;
    }
    expect(got).toMatchObject({
      code: 'target_locked',
      message: `Another download to this file is running; if none is, remove ${lock}.`,
    });
    expect(existsSync(output)).toBe(false);
  });

  /** `arkvory get lf/slow.bin -o output` under `umask`. */
  function getUnder(umask: string, output: string) {
    return spawnUnder(umask, [CLI, 'get', 'lf/slow.bin', '-o', output], {});
  }

  /** `download()` of lf/slow.bin to `output` in a process of its own under `umask` (no CLI to load: quicker to start). */
  function downloadUnder(umask: string, output: string) {
    const script = `const { download } = await import(process.env.SDK);
process.stdout.write(JSON.stringify(await download({ url: process.env.URL, output: process.env.OUT, key: process.env.ARKVORY_KEY })));`;
    return spawnUnder(umask, ['--input-type=module', '-e', script], {
      SDK: path.join(ROOT, 'client/index.ts'),
      URL: `${gw.url}${CONTENT}/slow.bin/content`,
      OUT: output,
    });
  }

  function spawnUnder(umask: string, args: readonly string[], more: Record<string, string>) {
    const child = spawn('sh', ['-c', `umask ${umask} && exec "$@"`, 'sh', process.execPath, ...args], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env, ...more },
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    return { child, exited, stderr: () => stderr };
  }

  async function partialHolds(running: ReturnType<typeof spawnUnder>, output: string, bytes: number): Promise<void> {
    // Generous for a loaded machine: this takes well under a second on an idle one.
    const deadline = Date.now() + 8000;
    while (((await stat(`${output}.partial`).catch(() => undefined))?.size ?? 0) < bytes) {
      if (Date.now() > deadline || running.child.exitCode !== null)
        throw new Error(`${output}.partial never held ${bytes} bytes: ${running.stderr()}`);
      await sleep(20);
    }
  }

  const modeOf = async (file: string) => (await stat(file)).mode & 0o7777;

  it.each([
    ['002', { file: 0o664, state: 0o600, lock: 0o644 }],
    ['077', { file: 0o600, state: 0o600, lock: 0o600 }],
  ] as const)(
    'under umask %s, the file and its partial get 0666 less the umask, the state file is private',
    async (umask, modes) => {
      const dir = await makeTempDir('arkvory-get-modes-');
      const output = path.join(dir, 'slow.bin');
      const running = downloadUnder(umask, output);
      await partialHolds(running, output, 64 * KiB);
      expect({
        partial: await modeOf(`${output}.partial`),
        state: await modeOf(`${output}.partial.json`),
        lock: await modeOf(`${output}.partial.lock`),
      }).toEqual({ partial: modes.file, state: modes.state, lock: modes.lock });
      const done = await running.exited;
      expect(done.code, done.stderr).toBe(0);
      expect(await modeOf(output)).toBe(modes.file);
    },
  );

  it('SIGINT: aborted, exit 1, the lock released and the partial file a prefix the next run resumes', async () => {
    const dir = await makeTempDir('arkvory-get-sigint-');
    const output = path.join(dir, 'slow.bin');
    const running = getUnder('022', output);
    await partialHolds(running, output, 128 * KiB);
    running.child.kill('SIGINT');
    const stopped = await running.exited;
    expect(stopped.code).toBe(1);
    expect(stopped.stderr.trim().split('\n').at(-1)).toBe('arkvory: aborted: The transfer was aborted.');
    expect(existsSync(output)).toBe(false);
    expect(existsSync(`${output}.partial.lock`)).toBe(false);
    const held = await readFile(`${output}.partial`);
    expect(held.length).toBeLessThan(slow.length);
    expect(held.equals(slow.subarray(0, held.length))).toBe(true);
    const resumed = await download({ url: `${gw.url}${CONTENT}/slow.bin/content`, output, key });
    expect(resumed).toMatchObject({ resumes: 1, sha256: sha256(slow) });
    expect(sha256(await readFile(output))).toBe(sha256(slow));
  });

  it('a resume of the same representation does not rewrite the state file (a rewrite on a full disk lost it)', async () => {
    const dir = await makeTempDir('arkvory-get-resume-state-');
    const output = path.join(dir, 'big.bin');
    const state = JSON.stringify({ etag: `"${sha256(big)}"`, total: big.length, digestHex: sha256(big) });
    await writeFile(`${output}.partial`, big.subarray(0, 100 * KiB));
    await writeFile(`${output}.partial.json`, state);
    // The state file cannot be written (the disk full by now): one that is not written is not lost.
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), {
      code: 'ENOSPC',
      syscall: 'write',
    });
    const written: string[] = [];
    const files = {
      open,
      writeFile: ((file, data, options) => {
        written.push(String(file));
        return String(file).endsWith('.partial.json') ? Promise.reject(full) : writeFile(file, data, options);
      }) as typeof writeFile,
    };
    const resumed = await download({ url: `${gw.url}${CONTENT}/big.bin/content`, output, key, files });
    expect(resumed).toMatchObject({ resumes: 1, sha256: sha256(big) });
    expect(written).toEqual([]);
    expect(sha256(await readFile(output))).toBe(sha256(big));
  });
});
