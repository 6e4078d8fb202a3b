/**
 * `arkvory put` (and the SDK's `upload`) against a real writer: a small file in one PUT with
 * Content-Digest (again: `exists`; other bytes: `conflict`), a large one through the multipart API
 * whose CLI process is SIGKILLed between parts and then resumed — only the missing parts are sent —
 * and an upload ended by its AbortSignal. Everything is read back byte for byte.
 */
import { spawn } from 'node:child_process';
import { readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../test/support/auth.ts';
import { randomContent, request, sha256 } from '../test/support/content.ts';
import { useTestDatabase } from '../test/support/database.ts';
import { CLI, ROOT, makeTempDir, runCli, startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { upload } from './index.ts';

const MiB = 1024 * 1024;
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
