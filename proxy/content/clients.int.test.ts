/**
 * Real download clients against a real gateway: curl -C -, wget -c and aria2c -x 8 -s 8 must
 * reproduce the exact bytes, including after an interrupted first attempt; on the directory store
 * through the static-HTTP store (nginx) and through the S3 store on SeaweedFS and MinIO.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { ALL_STORE_KINDS, startStoreBacking } from '../../test/support/store-kinds.ts';
import { waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;

function run(
  cmd: string,
  args: string[],
  options: { killAfterMs?: number } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    const timer =
      options.killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.killAfterMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stderr });
    });
  });
}

async function sizeOf(file: string): Promise<number> {
  return stat(file).then(
    (s) => s.size,
    () => 0,
  );
}

describe.each(ALL_STORE_KINDS)('real HTTP clients (%s store)', (kind) => {
  const db = useTestDatabase();
  let gw: GatewayProcess;
  let key: string;
  let dir: string;
  const data = randomContent(50 * MiB);
  const url = () => `${gw.url}/api/v1/repositories/dl/artifacts/big.bin/content`;

  beforeAll(async () => {
    await createRepository(db.pool, 'dl');
    ({ key } = await createServiceAccount(db.pool, { grants: { dl: 'write' } }));
    const backing = await startStoreBacking(kind);
    gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'info', ...backing.env },
      timeoutMs: 60_000,
    });
    const put = await request(`${gw.url}/api/v1/repositories/dl/artifacts/big.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${key}`, 'content-digest': contentDigest(data) },
      body: data,
    });
    expect(put.status).toBe(201);
    dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-clients-'));
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('curl -C - resumes an interrupted download to the exact bytes', async () => {
    const out = path.join(dir, 'curl.bin');
    // First attempt: throttled and cut off after 1.5 s, leaving a partial file.
    const first = await run('curl', [
      '-sS',
      '--fail',
      '--limit-rate',
      '8M',
      '--max-time',
      '1.5',
      '-H',
      `Authorization: Bearer ${key}`,
      '-o',
      out,
      url(),
    ]);
    expect(first.code).not.toBe(0);
    const partial = await sizeOf(out);
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(data.length);
    const resumed = await run('curl', [
      '-sS',
      '--fail',
      '-C',
      '-',
      '-H',
      `Authorization: Bearer ${key}`,
      '-o',
      out,
      url(),
    ]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(sha256(await readFile(out))).toBe(sha256(data));
  });

  it('wget -c resumes an interrupted download to the exact bytes', async () => {
    const out = path.join(dir, 'wget.bin');
    const first = await run(
      'wget',
      ['-q', '--limit-rate=8m', '--header', `Authorization: Bearer ${key}`, '-O', out, url()],
      { killAfterMs: 1500 },
    );
    expect(first.signal).toBe('SIGKILL');
    const partial = await sizeOf(out);
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(data.length);
    const resumed = await run('wget', ['-q', '-c', '--header', `Authorization: Bearer ${key}`, '-O', out, url()]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(sha256(await readFile(out))).toBe(sha256(data));
  });

  it('aria2c -x 8 -s 8 fetches the 50 MiB file in ranged pieces over parallel connections to the exact bytes', async () => {
    const resumed = await run('aria2c', [
      '-q',
      '-x',
      '8',
      '-s',
      '8',
      '--min-split-size=1M',
      '--file-allocation=none',
      '--allow-overwrite=true',
      '--auto-file-renaming=false',
      `--header=Authorization: Bearer ${key}`,
      '-d',
      dir,
      '-o',
      'aria.bin',
      url(),
    ]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(sha256(await readFile(path.join(dir, 'aria.bin')))).toBe(sha256(data));
    // The split really happened: several pieces came as 206. How many is aria2c's choice: its first
    // connection asks without Range (to learn the length), a fast download may end before all
    // eight connections asked, some ask without Range and give up, and one that finishes early may
    // ask for more (seen: 5 to 12 range requests).
    // Their request lines cross the gateway's stdout pipe after the answers: waited for.
    const ranged = () =>
      gw
        .logLines()
        .filter(
          (l) => l.msg === 'request' && l.method === 'GET' && String(l.route).endsWith('/content') && l.status === 206,
        );
    await waitUntil(() => ranged().length >= 2, { what: 'two 206 request lines', timeoutMs: 10_000, process: gw });
  });
});
