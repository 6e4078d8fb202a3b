/**
 * `arkvory put` (and the SDK's `upload`) against a real writer: a small file in one PUT with
 * Content-Digest (again: `exists`; other bytes: `conflict`), a large one through the multipart API
 * whose CLI process is SIGKILLed between parts and then resumed — only the missing parts are sent —
 * and an upload ended by its AbortSignal. Everything is read back byte for byte.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants, existsSync, statSync } from 'node:fs';
import { chmod, chown, mkdir, open, readdir, readFile, stat, statfs, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../test/support/auth.ts';
import { randomContent, request, sha256 } from '../test/support/content.ts';
import { useTestDatabase } from '../test/support/database.ts';
import { CLI, ROOT, makeTempDir, runCli, startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { upload } from './index.ts';

const MiB = 1024 * 1024;
const KiB = 1024;
const exec = promisify(execFile);
const db = useTestDatabase();
let gw: GatewayProcess;
let key: string;
let dir: string;
let stateDir: string;

beforeAll(async () => {
  await createRepository(db.pool, 'up');
  ({ key } = await createServiceAccount(db.pool, { grants: { up: 'write' } }));
  // 1 MiB/s of upload per principal: a 512 KiB part takes about half a second.
  gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_UPLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(MiB) },
    timeoutMs: 60_000,
  });
  dir = await makeTempDir('arkvory-put-');
  stateDir = path.join(dir, 'state');
});
afterAll(async () => {
  await gw?.stop();
});

const cliEnv = () => ({ ARKVORY_URL: gw.url, ARKVORY_KEY: key, ARKVORY_UPLOAD_STATE_DIR: stateDir });

async function content(p: string): Promise<Buffer> {
  const res = await request(`${gw.url}${p}/content`, { headers: bearer(key) });
  expect(res.status).toBe(200);
  return res.body;
}

describe('arkvory put', () => {
  it('sends a small file in one PUT with Content-Digest; the same again is `exists`, other bytes a conflict', async () => {
    const data = randomContent(300_000);
    const file = path.join(dir, 'small.bin');
    await writeFile(file, data);
    const first = await runCli(['put', file, 'up/pkg/1.0/small.bin'], cliEnv());
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({
      outcome: 'created',
      multipart: false,
      sha256: sha256(data),
      sizeBytes: data.length,
    });
    const again = await runCli(['put', file, 'up/pkg/1.0/small.bin'], cliEnv());
    expect(JSON.parse(again.stdout)).toMatchObject({ outcome: 'exists' });
    await writeFile(file, randomContent(1000));
    const conflict = await runCli(['put', file, 'up/pkg/1.0/small.bin'], cliEnv());
    expect(conflict.code).toBe(1);
    expect(conflict.stderr).toMatch(/^arkvory: conflict: /);
    expect((await content('/api/v1/repositories/up/packages/pkg/1.0/assets/small.bin')).equals(data)).toBe(true);
    const put = gw.logLines().find((l) => l.msg === 'request' && l.method === 'PUT' && l.status === 201);
    expect(put).toBeDefined();
  });

  it('resumes a multipart upload after the client was SIGKILLed between parts, sending only the missing parts', async () => {
    const data = randomContent(6 * MiB + 1234);
    const file = path.join(dir, 'large.bin');
    await writeFile(file, data);
    const args = ['put', file, 'up/large.bin', '--threshold', '1M', '--part-size', '512K', '--concurrency', '2'];
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...cliEnv() },
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise((resolve) => child.on('exit', resolve));
    const deadline = Date.now() + 60_000;
    const partsHeld = async () =>
      Number((await db.pool.query<{ n: string }>('SELECT count(*)::text AS n FROM arkvory_upload_parts')).rows[0]!.n);
    while ((await partsHeld()) < 3) {
      if (Date.now() > deadline) throw new Error(`no parts arrived:\n${stderr}`);
      await sleep(50);
    }
    child.kill('SIGKILL');
    await exited;
    const held = await partsHeld();
    const total = Math.ceil(data.length / (512 * 1024));
    expect(held).toBeLessThan(total);
    expect(await readdir(stateDir)).toHaveLength(1);

    const resumed = await runCli(args, cliEnv());
    expect(resumed.code, resumed.stderr).toBe(0);
    const result = JSON.parse(resumed.stdout) as {
      multipart: boolean;
      partsSent: number;
      partsReused: number;
      sha256: string;
    };
    expect(result.multipart).toBe(true);
    // Every part the gateway held when the client died is reused (one finishing after the count only adds).
    expect(result.partsReused).toBeGreaterThanOrEqual(held);
    expect(result.partsSent + result.partsReused).toBe(total);
    expect(result.sha256).toBe(sha256(data));
    expect((await content('/api/v1/repositories/up/artifacts/large.bin')).equals(data)).toBe(true);
    expect(await readdir(stateDir)).toHaveLength(0);
  });

  it('stops when its AbortSignal fires, with the code `aborted`', async () => {
    const data = randomContent(3 * MiB);
    const file = path.join(dir, 'aborted.bin');
    await writeFile(file, data);
    const controller = new AbortController();
    const parts: number[] = [];
    const error = await upload({
      file,
      url: `${gw.url}/api/v1/repositories/up/artifacts/aborted.bin`,
      key,
      multipartThreshold: MiB,
      partSize: 512 * 1024,
      concurrency: 1,
      stateDir,
      signal: controller.signal,
      onPart: (p) => {
        parts.push(p.partNumber);
        controller.abort();
      },
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'aborted' });
    expect(parts).toEqual([1]);
    expect(
      (await request(`${gw.url}/api/v1/repositories/up/artifacts/aborted.bin/content`, { headers: bearer(key) }))
        .status,
    ).toBe(404);
  });

  it('answers bad input with one line and a clear exit code, leaving nothing behind', async () => {
    const missing = await runCli(['put', path.join(dir, 'no-such-file'), 'up/x.bin'], cliEnv());
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^arkvory: io: ENOENT/);
    const noKey = await runCli(['put', path.join(dir, 'small.bin'), 'up/x.bin'], { ARKVORY_URL: gw.url });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('no API key');
    const badTarget = await runCli(['put', path.join(dir, 'small.bin'), 'up/a/b/c/d'], cliEnv());
    expect(badTarget.code).toBe(1);
    expect(badTarget.stderr).toMatch(/^arkvory: invalid_argument: /);
    const unwritable = await runCli(
      ['get', 'up/pkg/1.0/small.bin', '-o', path.join(dir, 'no-such-dir', 'x')],
      cliEnv(),
    );
    expect(unwritable.code).toBe(1);
    expect(unwritable.stderr).toMatch(/^arkvory: io: ENOENT/);
    expect((await runCli(['get'], cliEnv())).code).toBe(2);
    // A key no header can carry (a zero-width space pasted along with it): refused at once, exit 2,
    // not retried as a failing gateway nor answered with a stack, and not quoted back.
    const pasted = `${key.slice(0, 20)}\u200b${key.slice(20)}`;
    for (const args of [
      ['put', path.join(dir, 'small.bin'), 'up/x.bin'],
      ['get', 'up/pkg/1.0/small.bin', '-o', path.join(dir, 'pasted.bin')],
      ['presign', 'up', 'pkg/1.0/small.bin'],
    ]) {
      const refused = await runCli(args, { ...cliEnv(), ARKVORY_KEY: pasted });
      expect(refused.code, args[0]).toBe(2);
      expect(refused.stderr, args[0]).toContain('no request was sent');
      expect(refused.stderr, args[0]).not.toContain(key.slice(20));
    }
  });
});

describe('arkvory put and its upload state directory', () => {
  /** 40 KiB in 16 KiB parts through the multipart API: 3 parts, the state written before the first. */
  const data = randomContent(40 * KiB);
  const SMALL = { multipartThreshold: 16 * KiB, partSize: 16 * KiB, concurrency: 1 } as const;
  let n = 0;

  /** A new file of `data` and the URL to upload it to (a new artifact each time). */
  async function fresh(): Promise<{ file: string; url: string }> {
    const name = `state-${++n}.bin`;
    const file = path.join(dir, name);
    await writeFile(file, data);
    return { file, url: `${gw.url}/api/v1/repositories/up/artifacts/${name}` };
  }

  /** The name `upload` gives the state of `url` in `stateDir` (its URL, digest, size and part size). */
  function stateFileOf(stateDirectory: string, url: string): string {
    const id = createHash('sha256')
      .update([url, sha256(data), data.length, SMALL.partSize].join('\n'))
      .digest('hex')
      .slice(0, 32);
    return path.join(stateDirectory, `${id}.json`);
  }

  const modeOf = (file: string) => statSync(file).mode & 0o7777;

  it.each([
    ['a new state directory', false],
    ['one an earlier version made 0755', true],
  ])('%s is 0700 and the state file in it 0600, whatever the umask', async (_, existing) => {
    const states = path.join(await makeTempDir('arkvory-put-modes-'), 'cache', 'uploads');
    if (existing) {
      await mkdir(states, { recursive: true });
      await chmod(states, 0o755);
    }
    const { file, url } = await fresh();
    const seen: Array<{ dir: number; state: number }> = [];
    const result = await upload({
      file,
      url,
      key,
      ...SMALL,
      stateDir: states,
      onPart: () => seen.push({ dir: modeOf(states), state: modeOf(stateFileOf(states, url)) }),
    });
    expect(result).toMatchObject({ multipart: true, partsSent: 3, sha256: sha256(data) });
    expect(seen[0]).toEqual({ dir: 0o700, state: 0o600 });
    expect(modeOf(path.dirname(states))).toBe(existing ? 0o755 : 0o700);
  });

  it('a symlink at the state directory is refused before anything is sent, never followed', async () => {
    const base = await makeTempDir('arkvory-put-dirlink-');
    const elsewhere = path.join(base, 'theirs');
    await mkdir(elsewhere);
    const states = path.join(base, 'uploads');
    await symlink(elsewhere, states);
    const { file, url } = await fresh();
    const error = await upload({ file, url, key, ...SMALL, stateDir: states }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'invalid_argument',
      message: `The upload state directory ${states} is a symbolic link: set ARKVORY_UPLOAD_STATE_DIR (stateDir) to a directory of your own.`,
    });
    expect(await readdir(elsewhere)).toEqual([]);
    expect((await request(`${url}/content`, { headers: bearer(key) })).status).toBe(404);
  });

  it("another user's directory at the state directory's name is refused before anything is sent", async () => {
    const states = path.join(await makeTempDir('arkvory-put-theirs-'), 'uploads');
    await mkdir(states, { mode: 0o777 });
    await chown(states, 65534, 65534);
    const { file, url } = await fresh();
    const error = await upload({ file, url, key, ...SMALL, stateDir: states }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'invalid_argument',
      message: `The upload state directory ${states} belongs to another user (uid 65534): set ARKVORY_UPLOAD_STATE_DIR (stateDir) to a directory of your own.`,
    });
    expect(await readdir(states)).toEqual([]);
    expect((await request(`${url}/content`, { headers: bearer(key) })).status).toBe(404);
  });

  it('a symlink at the state file is replaced, never written through', async () => {
    const states = path.join(await makeTempDir('arkvory-put-filelink-'), 'uploads');
    await mkdir(states, { mode: 0o700 });
    const victim = path.join(dir, 'victim.txt');
    await writeFile(victim, 'not yours to write\n');
    const { file, url } = await fresh();
    const state = stateFileOf(states, url);
    await symlink(victim, state);
    let planted: boolean | undefined;
    const result = await upload({
      file,
      url,
      key,
      ...SMALL,
      stateDir: states,
      onPart: () => (planted ??= statSync(state, { throwIfNoEntry: false })?.isFile()),
    });
    expect(result).toMatchObject({ multipart: true, partsSent: 3 });
    expect(planted).toBe(true);
    expect(await readFile(victim, 'utf8')).toBe('not yours to write\n');
    expect(await readdir(states)).toEqual([]);
  });

  it('a FIFO at the state file is a fresh start at once, never a read that blocks for good', async () => {
    const states = path.join(await makeTempDir('arkvory-put-fifo-'), 'uploads');
    await mkdir(states, { mode: 0o700 });
    const { file, url } = await fresh();
    const state = stateFileOf(states, url);
    await exec('mkfifo', [state]);
    const attempt = upload({ file, url, key, ...SMALL, stateDir: states }).catch((e: unknown) => e);
    const got = await Promise.race([attempt, sleep(3000).then(() => 'still waiting on the FIFO after 3 s')]);
    if (typeof got === 'string') {
      // A writer ends a read blocked on the FIFO, a reader a write: this test ends either way.
      const writer = await open(state, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
      await sleep(500);
      const reader = await open(state, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => undefined);
      await Promise.race([attempt, sleep(2000)]);
      await writer?.close();
      await reader?.close();
    }
    expect(got).toMatchObject({ multipart: true, partsSent: 3, partsReused: 0, sha256: sha256(data) });
    expect(await readdir(states)).toEqual([]);
  });

  /** An upload of a new file stopped after its first part: its state file names a session open on the gateway. */
  async function stoppedAfterOnePart(states: string): Promise<{ file: string; url: string; state: string }> {
    const { file, url } = await fresh();
    const controller = new AbortController();
    const error = await upload({
      file,
      url,
      key,
      ...SMALL,
      stateDir: states,
      signal: controller.signal,
      onPart: () => controller.abort(),
    }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'aborted' });
    const state = stateFileOf(states, url);
    expect(JSON.parse(await readFile(state, 'utf8'))).toMatchObject({ url: expect.stringContaining(gw.url) });
    return { file, url, state };
  }

  it.each([
    // Valid JSON naming the open session, padded to 8 MiB: read whole before, and resumed.
    ['over 4 KiB', (held: string) => `${held.slice(0, -1)}${' '.repeat(8 * MiB)}}`],
    ['not JSON', (held: string) => held.slice(0, -3)],
  ])('a state file %s is not read: a fresh start, the state file replaced', async (_, corrupt) => {
    const states = path.join(await makeTempDir('arkvory-put-corrupt-'), 'uploads');
    const { file, url, state } = await stoppedAfterOnePart(states);
    await writeFile(state, corrupt(await readFile(state, 'utf8')));
    const result = await upload({ file, url, key, ...SMALL, stateDir: states });
    expect(result).toMatchObject({ multipart: true, partsSent: 3, partsReused: 0, sha256: sha256(data) });
    expect(await readdir(states)).toEqual([]);
    expect((await content(new URL(url).pathname)).equals(data)).toBe(true);
  });

  it('a full disk as the state is written: no_space with one line, never a bare ENOSPC', async () => {
    // A real 512 KiB tmpfs holding the state directory, filled to the last byte.
    const mount = await makeTempDir('arkvory-put-tmpfs-');
    await exec('mount', ['-t', 'tmpfs', '-o', 'size=512k,mode=0755', 'tmpfs', mount]);
    onTestFinished(() => exec('umount', ['-l', mount]).then(() => undefined));
    const states = path.join(mount, 'uploads');
    await mkdir(states, { mode: 0o700 });
    const { bavail, bsize } = await statfs(mount);
    await writeFile(path.join(mount, 'filler'), Buffer.alloc(bavail * bsize));
    expect((await statfs(mount)).bavail).toBe(0);
    const { file, url } = await fresh();
    const state = stateFileOf(states, url);
    const error = await upload({ file, url, key, ...SMALL, stateDir: states }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'no_space',
      message: `No space left to write the upload state ${state} (the disk is full): free some space and run the upload again; the parts the gateway holds are kept for it.`,
    });
    expect(await readdir(states)).toEqual([]);
    const cli = await runCli(
      [
        'put',
        file,
        new URL(url).pathname.replace('/api/v1/repositories/', '').replace('/artifacts', ''),
        '--threshold',
        '16K',
        '--part-size',
        '16K',
      ],
      {
        ...cliEnv(),
        ARKVORY_UPLOAD_STATE_DIR: states,
      },
    );
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(/^arkvory: no_space: No space left to write the upload state .*\n$/);
    expect(existsSync(state)).toBe(false);
    expect((await stat(states)).isDirectory()).toBe(true);
  });
});
