/**
 * Clients as they are, against a real gateway: Basic credentials from curl -u, wget
 * --user/--password, aria2c --http-user/--http-passwd and a URL with userinfo; pre-signed links
 * through the API, fetched with no header by curl (Range, conditionals, -C -), wget -c, aria2c -x 4
 * and Chromium; links that die with their key, grant, principal, expiry or a secret rotation.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS } from '../../test/support/chromium.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { canonicalPath, presignQueryString, signPresign } from '../../policy/auth/presign-signature.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { offlineSdist } from '../../test/support/python-sdist.ts';
import { runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const CHALLENGE = 'Bearer realm="arkvory", Basic realm="arkvory"';
const UNAUTHORIZED = { code: 'unauthorized', message: 'A valid API key is required.' };

function run(
  cmd: string,
  args: string[],
  options: { killAfterMs?: number } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    const timer =
      options.killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.killAfterMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

const sizeOf = (file: string) =>
  stat(file).then(
    (s) => s.size,
    () => 0,
  );

/** Polls until `check` holds, failing after `ms` (the revocation bound is 2 s; allow scheduling slack). */
async function eventually(check: () => Promise<boolean>, ms = 4000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await sleep(100);
  }
}

const db = useTestDatabase();
let gw: GatewayProcess;
let dir: string;
let owner: { principalId: string; keyId: string; key: string; name: string };
const data = randomContent(12 * MiB);
const small = randomContent(100_000);
const target = '/api/v1/repositories/dl/artifacts/big.bin';

beforeAll(async () => {
  await createRepository(db.pool, 'dl');
  await createRepository(db.pool, 'other');
  owner = await createServiceAccount(db.pool, { name: 'ci-bot', grants: { dl: 'write' } });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, timeoutMs: 60_000 });
  for (const [p, body] of [
    [target, data],
    ['/api/v1/repositories/dl/artifacts/small.bin', small],
    ['/api/v1/repositories/dl/packages/pkg/1.0/assets/a%40b.tgz', small],
  ] as const) {
    const put = await request(`${gw.url}${p}`, {
      method: 'PUT',
      headers: { ...bearer(owner.key), 'content-digest': contentDigest(body) },
      body,
    });
    expect(put.status, p).toBe(201);
  }
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-presign-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function presign(
  key: string,
  base: string,
  body: Record<string, unknown> = {},
): Promise<{ url: string; path: string; expiresAt: string }> {
  const res = await request(`${gw.url}${base}/presign`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(body)),
  });
  expect(res.status, res.body.toString()).toBe(201);
  return JSON.parse(res.body.toString()) as { url: string; path: string; expiresAt: string };
}

describe('Basic credentials', () => {
  it('are accepted exactly like Bearer: same principal, same 401 body, a challenge offering both schemes', async () => {
    const basic = (user: string, key: string) => ({
      authorization: `Basic ${Buffer.from(`${user}:${key}`).toString('base64')}`,
    });
    // Each with an id of its own: their request lines are waited for below.
    const marked = (id: string) => ({ 'x-request-id': `basic-like-bearer-${id}` });
    const viaBearer = await request(`${gw.url}${target}`, { headers: { ...bearer(owner.key), ...marked('bearer') } });
    for (const user of ['ci-bot', 'anything']) {
      const viaBasic = await request(`${gw.url}${target}`, { headers: { ...basic(user, owner.key), ...marked(user) } });
      expect(viaBasic.status).toBe(200);
      expect(viaBasic.body.equals(viaBearer.body)).toBe(true);
    }
    const revoked = await createServiceAccount(db.pool, { grants: { dl: 'read' } });
    await new AdminStore(db.pool).revokeKey(revoked.keyId);
    for (const headers of [
      {},
      basic('u', 'nope'),
      basic('u', revoked.key),
      basic('u', `ark_${owner.keyId}_${'A'.repeat(43)}`),
      bearer(revoked.key),
    ]) {
      const r = await request(`${gw.url}${target}/content`, { headers });
      expect(r.status).toBe(401);
      expect(r.headers['www-authenticate']).toBe(CHALLENGE);
      expect(JSON.parse(r.body.toString())).toEqual(UNAUTHORIZED);
    }
    // Request lines cross the gateway's stdout pipe after the answers: these three are waited for.
    const ids = ['bearer', 'ci-bot', 'anything'].map((id) => marked(id)['x-request-id']);
    await waitUntil(() => ids.every((id) => gw.logLines().some((l) => l.msg === 'request' && l.clientReqId === id)), {
      what: 'the request lines of the Bearer and Basic requests',
      timeoutMs: 10_000,
      process: gw,
    });
    const principals = gw
      .logLines()
      .filter((l) => l.msg === 'request' && l.status === 200 && l.route === '/api/v1/repositories/:repo/artifacts/:id')
      .map((l) => l.principal);
    expect(new Set(principals)).toEqual(new Set([owner.principalId]));
  });

  it('work from curl -u, wget --user/--password, aria2c --http-user/--http-passwd and a URL with userinfo', async () => {
    const url = `${gw.url}${target}/content`;
    const outputs: string[] = [];
    const curl = path.join(dir, 'basic-curl.bin');
    expect((await run('curl', ['-sS', '--fail', '-u', `ci-bot:${owner.key}`, '-o', curl, url])).code).toBe(0);
    const wget = path.join(dir, 'basic-wget.bin');
    const w = await run('wget', ['-q', '--user', 'ci-bot', '--password', owner.key, '-O', wget, url]);
    expect(w.code, w.stderr).toBe(0);
    const a = await run('aria2c', [
      '-q',
      '--file-allocation=none',
      '--allow-overwrite=true',
      '--auto-file-renaming=false',
      `--http-user=ci-bot`,
      `--http-passwd=${owner.key}`,
      '-d',
      dir,
      '-o',
      'basic-aria.bin',
      url,
    ]);
    expect(a.code, a.stderr).toBe(0);
    const userinfo = `http://ci-bot:${owner.key}@127.0.0.1:${gw.port}${target}/content`;
    const curlUserinfo = path.join(dir, 'basic-curl-userinfo.bin');
    expect((await run('curl', ['-sS', '--fail', '-o', curlUserinfo, userinfo])).code).toBe(0);
    const wgetUserinfo = path.join(dir, 'basic-wget-userinfo.bin');
    expect((await run('wget', ['-q', '-O', wgetUserinfo, userinfo])).code).toBe(0);
    outputs.push(curl, wget, path.join(dir, 'basic-aria.bin'), curlUserinfo, wgetUserinfo);
    for (const file of outputs) expect(sha256(await readFile(file)), file).toBe(sha256(data));
    // The key never reaches a log line, in either form.
    const logs = gw.logs();
    expect(logs).not.toContain(owner.key);
    expect(logs).not.toContain(owner.key.slice(-43));
    expect(logs).not.toContain(Buffer.from(`ci-bot:${owner.key}`).toString('base64'));
  });
});

describe('pip with credentials in the URL (Basic)', () => {
  it('downloads an sdist from the gateway, and fails with a wrong key', async () => {
    const sdist = await offlineSdist(dir, 'pkg26');
    const asset = '/api/v1/repositories/dl/packages/pkg26/1.0/assets/pkg26-1.0.tar.gz';
    expect(
      (
        await request(`${gw.url}${asset}`, {
          method: 'PUT',
          headers: { ...bearer(owner.key), 'content-digest': contentDigest(sdist) },
          body: sdist,
        })
      ).status,
    ).toBe(201);
    const url = (key: string) => `http://ci-bot:${key}@127.0.0.1:${gw.port}${asset}/content`;
    const out = path.join(dir, 'pip-out');
    const pip = await run('python3', [
      '-m',
      'pip',
      'download',
      '--no-deps',
      '--no-index',
      '--disable-pip-version-check',
      '-d',
      out,
      url(owner.key),
    ]).catch((err: unknown) => {
      throw new Error(`python3 with pip is needed (apt-get install python3-pip): ${(err as Error).message}`);
    });
    expect(pip.code, pip.stderr).toBe(0);
    expect((await readFile(path.join(out, 'content'))).equals(sdist)).toBe(true);
    const denied = await run('python3', [
      '-m',
      'pip',
      'download',
      '--no-deps',
      '--no-index',
      '--disable-pip-version-check',
      '-d',
      path.join(dir, 'pip-denied'),
      url(`ark_${owner.keyId}_${'A'.repeat(43)}`),
    ]);
    expect(denied.code).not.toBe(0);
    expect(denied.stdout + denied.stderr).toContain('401');
  });
});

describe('Maven with a settings.xml server entry (Basic)', () => {
  // The documented docs/clients.md example, run as written: the wagon plugin comes from Maven Central
  // (a registry this machine reaches) into a local repository of the test's own.
  it('downloads a jar through the wagon plugin with the key from settings.xml, and fails with a wrong key', {
    timeout: 240_000,
  }, async () => {
    const jar = randomContent(70_000);
    const asset = '/api/v1/repositories/dl/packages/app/1.0/assets/app-1.0.jar';
    expect(
      (
        await request(`${gw.url}${asset}`, {
          method: 'PUT',
          headers: { ...bearer(owner.key), 'content-digest': contentDigest(jar) },
          body: jar,
        })
      ).status,
    ).toBe(201);
    const settings = path.join(dir, 'settings.xml');
    await writeFile(
      settings,
      '<settings><servers><server><id>arkvory</id><username>ci</username><password>${env.ARKVORY_KEY}</password></server></servers></settings>\n',
    );
    const mvn = (key: string, out: string) =>
      new Promise<{ code: number | null; output: string }>((resolve, reject) => {
        const child = spawn(
          'mvn',
          [
            '-B',
            '-s',
            settings,
            `-Dmaven.repo.local=${path.join(os.homedir(), '.m2', 'repository')}`,
            'org.codehaus.mojo:wagon-maven-plugin:2.0.2:download-single',
            '-Dwagon.serverId=arkvory',
            `-Dwagon.url=${gw.url}/api/v1/repositories/dl/packages/app/1.0`,
            '-Dwagon.fromFile=assets/app-1.0.jar/content',
            `-Dwagon.toFile=${out}`,
          ],
          { cwd: dir, env: { ...process.env, ARKVORY_KEY: key }, stdio: ['ignore', 'pipe', 'pipe'] },
        );
        let output = '';
        child.stdout.on('data', (d: Buffer) => (output += d.toString()));
        child.stderr.on('data', (d: Buffer) => (output += d.toString()));
        child.on('error', (err: NodeJS.ErrnoException) =>
          reject(
            new Error(err.code === 'ENOENT' ? 'mvn is not on PATH; on Debian: apt-get install -y maven' : err.message),
          ),
        );
        child.on('close', (code) => resolve({ code, output }));
      });
    const ok = await mvn(owner.key, path.join(dir, 'app-1.0.jar'));
    expect(ok.code, ok.output.slice(-3000)).toBe(0);
    expect((await readFile(path.join(dir, 'app-1.0.jar'))).equals(jar)).toBe(true);
    const denied = await mvn(`ark_${owner.keyId}_${'A'.repeat(43)}`, path.join(dir, 'denied.jar'));
    expect(denied.code).not.toBe(0);
    expect(denied.output).toMatch(/401|Unauthorized|Not authorized/i);
    expect(existsSync(path.join(dir, 'denied.jar'))).toBe(false);
  });
});

describe('pre-signed links', () => {
  it('open GET/HEAD of that one target with no header, charged to the presigning principal', async () => {
    const link = await presign(owner.key, target, { expiresInSeconds: 3600 });
    expect(link.url).toBe(`${gw.url}${link.path}`);
    expect(Date.parse(link.expiresAt) - Date.now()).toBeGreaterThan(3500_000);
    const got = await request(link.url);
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(data));
    const head = await request(link.url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(data.length));
    // Range and conditionals through the link.
    const ranged = await request(link.url, { headers: { range: 'bytes=10-19', 'if-range': String(got.headers.etag) } });
    expect(ranged.status).toBe(206);
    expect(ranged.body.equals(data.subarray(10, 20))).toBe(true);
    expect((await request(link.url, { headers: { 'if-none-match': String(got.headers.etag) } })).status).toBe(304);
    // Not another target, not another method, not a tampered parameter.
    const query = link.path.slice(link.path.indexOf('?'));
    for (const other of [
      `/api/v1/repositories/dl/artifacts/small.bin/content${query}`,
      `${target}${query}`,
      `/api/v1/repositories/dl/artifacts/big.bin/content${query.replace(/X-Arkvory-Expires=(\d+)/, (_, n: string) => `X-Arkvory-Expires=${Number(n) + 1}`)}`,
    ]) {
      const r = await request(`${gw.url}${other}`);
      expect(r.status, other).toBe(401);
      expect(JSON.parse(r.body.toString())).toEqual(UNAUTHORIZED);
    }
    const put = await request(`${gw.url}${target}${query}`, { method: 'PUT', body: Buffer.from('x') });
    expect(put.status).toBe(401);
    // Every request the link made is the owner's, like its key's own requests. Their lines cross the
    // gateway's stdout pipe after the answers: waited for.
    const served = () =>
      gw
        .logLines()
        .filter(
          (l) =>
            l.msg === 'request' &&
            l.route === '/api/v1/repositories/:repo/artifacts/:id/content' &&
            [200, 206, 304].includes(l.status as number),
        );
    await waitUntil(() => served().length >= 4, {
      what: 'the request lines of the link',
      timeoutMs: 10_000,
      process: gw,
    });
    const linkRequests = served();
    expect(new Set(linkRequests.map((l) => l.principal))).toEqual(new Set([owner.principalId]));
    expect(gw.logs()).not.toContain(link.path.slice(link.path.indexOf('X-Arkvory-Signature=') + 20));
  });

  it('bind encoded names canonically and refuse lifetimes beyond the maximum', async () => {
    const link = await presign(owner.key, '/api/v1/repositories/dl/packages/pkg/1.0/assets/a@b.tgz');
    expect(link.path.startsWith('/api/v1/repositories/dl/packages/pkg/1.0/assets/a%40b.tgz/content?')).toBe(true);
    expect(sha256((await request(link.url)).body)).toBe(sha256(small));
    expect((await request(`${gw.url}${link.path.replace('a%40b', 'a@b')}`)).status).toBe(200);
    for (const body of [{ expiresInSeconds: 604801 }, { expiresInSeconds: 0 }, { expiresInSeconds: '1h' }]) {
      const r = await request(`${gw.url}${target}/presign`, {
        method: 'POST',
        headers: { ...bearer(owner.key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify(body)),
      });
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body.toString()).message).toContain('ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS');
    }
    expect(
      (
        await request(`${gw.url}/api/v1/repositories/dl/artifacts/missing/presign`, {
          method: 'POST',
          headers: bearer(owner.key),
        })
      ).status,
    ).toBe(404);
    expect(
      (
        await request(`${gw.url}/api/v1/repositories/other/artifacts/x/presign`, {
          method: 'POST',
          headers: bearer(owner.key),
        })
      ).status,
    ).toBe(404);
  });

  it('expire: a link past its expiry (signed with the stored secret) is refused', async () => {
    const { rows } = await db.pool.query<{ id: string; secret: Buffer }>(
      'SELECT id::text AS id, secret FROM arkvory_presign_secrets WHERE retires_at IS NULL ORDER BY id DESC LIMIT 1',
    );
    const now = Math.floor(Date.now() / 1000);
    const fields = {
      path: canonicalPath(`${target}/content`)!,
      keyId: owner.keyId,
      secretId: rows[0]!.id,
      issuedAt: now - 10,
      sha256: sha256(data),
    };
    const at = (expiresAt: number) =>
      `${gw.url}${fields.path}?${presignQueryString({ ...fields, expiresAt }, signPresign(rows[0]!.secret, { ...fields, expiresAt }))}`;
    expect((await request(at(now + 60), { method: 'HEAD' })).status).toBe(200);
    expect((await request(at(now - 1), { method: 'HEAD' })).status).toBe(401);
  });

  it('made under a higher ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS, die when the gateway restarts with a lower one', async () => {
    // A database of its own: this test restarts its gateway, and the file's gateway keeps serving.
    const own = await createTestDatabase();
    try {
      await createRepository(own.pool, 'dl');
      const sa = await createServiceAccount(own.pool, { name: 'max-bot', grants: { dl: 'write' } });
      const env = { ARKVORY_DATABASE_URL: own.url };
      const before = await startGateway({ env });
      const put = await request(`${before.url}${target}`, {
        method: 'PUT',
        headers: { ...bearer(sa.key), 'content-digest': contentDigest(small) },
        body: small,
      });
      expect(put.status).toBe(201);
      const presignOn = async (origin: string, expiresInSeconds: number) => {
        const res = await request(`${origin}${target}/presign`, {
          method: 'POST',
          headers: { ...bearer(sa.key), 'content-type': 'application/json' },
          body: Buffer.from(JSON.stringify({ expiresInSeconds })),
        });
        expect(res.status, res.body.toString()).toBe(201);
        return (JSON.parse(res.body.toString()) as { path: string }).path;
      };
      const long = await presignOn(before.url, 7200);
      const short = await presignOn(before.url, 600);
      for (const link of [long, short]) expect((await request(`${before.url}${link}`)).status).toBe(200);
      await before.stop();

      const after = await startGateway({ env: { ...env, ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS: '3600' } });
      const refused = await request(`${after.url}${long}`);
      expect(refused.status).toBe(401);
      expect(JSON.parse(refused.body.toString())).toEqual(UNAUTHORIZED);
      expect(refused.headers['www-authenticate']).toBe(CHALLENGE);
      expect((await request(`${after.url}${long}`, { method: 'HEAD' })).status).toBe(401);
      expect(sha256((await request(`${after.url}${short}`)).body)).toBe(sha256(small));
      // A link made for the whole new maximum is fine; one signed as if made later has too much left.
      expect((await request(`${after.url}${await presignOn(after.url, 3600)}`)).status).toBe(200);
      const { rows } = await own.pool.query<{ id: string; secret: Buffer }>(
        'SELECT id::text AS id, secret FROM arkvory_presign_secrets WHERE retires_at IS NULL ORDER BY id DESC LIMIT 1',
      );
      const issuedAt = Math.floor(Date.now() / 1000) + 600;
      const fields = {
        path: canonicalPath(`${target}/content`)!,
        keyId: sa.keyId,
        secretId: rows[0]!.id,
        issuedAt,
        expiresAt: issuedAt + 3600,
        sha256: sha256(small),
      };
      const ahead = `${fields.path}?${presignQueryString(fields, signPresign(rows[0]!.secret, fields))}`;
      expect((await request(`${after.url}${ahead}`)).status).toBe(401);
      await after.stop();
    } finally {
      await own.drop();
    }
  }, 60_000);

  it('die within the auth bound when the key is revoked, the grant removed or the principal disabled', async () => {
    const store = new AdminStore(db.pool);
    const alive = (url: string) => async () => (await request(url, { method: 'HEAD' })).status === 200;
    const dead = (url: string, status: number) => async () =>
      (await request(url, { method: 'HEAD' })).status === status;

    const byKey = await createServiceAccount(db.pool, { grants: { dl: 'read' } });
    const keyLink = await presign(byKey.key, target);
    await eventually(alive(keyLink.url));
    await store.revokeKey(byKey.keyId);
    await eventually(dead(keyLink.url, 401));

    const byGrant = await createServiceAccount(db.pool, { grants: { dl: 'read' } });
    const grantLink = await presign(byGrant.key, target);
    await eventually(alive(grantLink.url));
    await store.removeGrant(byGrant.principalId, 'dl');
    await eventually(dead(grantLink.url, 404));

    const byPrincipal = await createServiceAccount(db.pool, { grants: { dl: 'read' } });
    const principalLink = await presign(byPrincipal.key, target);
    await eventually(alive(principalLink.url));
    await store.setPrincipalDisabled(byPrincipal.principalId, true);
    await eventually(dead(principalLink.url, 401));

    // Re-enabling restores the keys, not the links made before the disable (docs/auth.md).
    await store.setPrincipalDisabled(byPrincipal.principalId, false);
    const keyWorks = async () =>
      (await request(`${gw.url}${target}/content`, { method: 'HEAD', headers: bearer(byPrincipal.key) })).status ===
      200;
    await eventually(keyWorks);
    expect((await request(principalLink.url, { method: 'HEAD' })).status).toBe(401);
    // Asked for at once: dated (whole seconds) after the disable, waiting for the next second if need be.
    const renewed = await presign(byPrincipal.key, target);
    expect((await request(renewed.url, { method: 'HEAD' })).status).toBe(200);
    expect((await request(principalLink.url, { method: 'HEAD' })).status).toBe(401);
  });

  it('die when the signing secret is rotated (`arkvory presign-secret rotate`), unless within the grace period', async () => {
    const before = await presign(owner.key, target);
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'warn' };
    const graced = await runCli(['presign-secret', 'rotate', '--grace', '1h'], env);
    expect(graced.code, graced.stderr).toBe(0);
    const rotation = JSON.parse(graced.stdout) as { secretId: string; oldLinksValidUntil: string };
    expect(Date.parse(rotation.oldLinksValidUntil) - Date.now()).toBeGreaterThan(3500_000);
    const during = await presign(owner.key, target);
    expect(during.path).toContain(`X-Arkvory-Secret=${rotation.secretId}&`);
    await sleep(2500);
    expect((await request(before.url, { method: 'HEAD' })).status).toBe(200);
    const now = await runCli(['presign-secret', 'rotate'], env);
    expect(now.code, now.stderr).toBe(0);
    await eventually(
      async () =>
        (await request(before.url, { method: 'HEAD' })).status === 401 &&
        (await request(during.url, { method: 'HEAD' })).status === 401,
    );
    const after = await presign(owner.key, target);
    expect((await request(after.url, { method: 'HEAD' })).status).toBe(200);
    // An explicit grace of 0 is the default's: old links stop at once.
    const zero = await runCli(['presign-secret', 'rotate', '--grace', '0m'], env);
    expect(zero.code, zero.stderr).toBe(0);
    await eventually(async () => (await request(after.url, { method: 'HEAD' })).status === 401);
    const usage = await runCli(['presign-secret', 'rotate', '--grace', 'soon'], env);
    expect(usage.code).toBe(2);
    // A grace past PostgreSQL's last date is refused as the operator's mistake, not a crash.
    const far = await runCli(['presign-secret', 'rotate', '--grace', '100000000d'], env);
    expect(far.code, far.stderr).toBe(2);
    expect(far.stderr).toMatch(/--grace "100000000d" is longer than 365d/);
    expect(far.stderr).not.toContain('    at ');
  });

  it('resume through curl -C -, wget -c and aria2c -x 4 to the exact bytes', async () => {
    const link = await presign(owner.key, target);
    const curl = path.join(dir, 'link-curl.bin');
    // What a download cut at 3 MiB leaves (curl's own --limit-rate cut let a CI run through whole,
    // so the cut is made here; wget and aria2c below are cut for real).
    await writeFile(curl, data.subarray(0, 3 * MiB));
    const resumed = await run('curl', ['-sS', '--fail', '-C', '-', '-w', '%{http_code}', '-o', curl, link.url]);
    expect(resumed.code, resumed.stderr).toBe(0);
    // Resumed from where the file stopped, not fetched again whole.
    expect(resumed.stdout).toBe('206');
    expect(sha256(await readFile(curl))).toBe(sha256(data));

    const wget = path.join(dir, 'link-wget.bin');
    await run('wget', ['-q', '--limit-rate=2m', '-O', wget, link.url], { killAfterMs: 1500 });
    expect(await sizeOf(wget)).toBeGreaterThan(0);
    expect(await sizeOf(wget)).toBeLessThan(data.length);
    const w = await run('wget', ['-q', '-c', '-O', wget, link.url]);
    expect(w.code, w.stderr).toBe(0);
    expect(sha256(await readFile(wget))).toBe(sha256(data));

    const a = await run('aria2c', [
      '-q',
      '-x',
      '4',
      '-s',
      '4',
      '--min-split-size=1M',
      '--file-allocation=none',
      '--allow-overwrite=true',
      '--auto-file-renaming=false',
      '-d',
      dir,
      '-o',
      'link-aria.bin',
      link.url,
    ]);
    expect(a.code, a.stderr).toBe(0);
    expect(sha256(await readFile(path.join(dir, 'link-aria.bin')))).toBe(sha256(data));
  });

  it('download in Chromium, with no header', async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)`);
    const link = await presign(owner.key, '/api/v1/repositories/dl/artifacts/small.bin');
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      const context = await browser.newContext({ acceptDownloads: true });
      const page = await context.newPage();
      const [download] = await Promise.all([
        page.waitForEvent('download', { timeout: 20_000 }),
        page.goto(link.url).catch(() => undefined),
      ]);
      const saved = path.join(dir, 'browser.bin');
      await download.saveAs(saved);
      expect(await download.failure()).toBeNull();
      expect(sha256(await readFile(saved))).toBe(sha256(small));
    } finally {
      await browser.close();
    }
  });
});
