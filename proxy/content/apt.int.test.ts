/**
 * apt against a real gateway, as docs/clients.md shows it: a tiny .deb built by `dpkg-deb --build`,
 * `Packages` by `dpkg-scanpackages`, `Release` by `apt-ftparchive release`, uploaded with `curl -T`
 * as the assets of one package version, and read back by real `apt-get update` and `apt-get
 * download` through the flat-repository route `…/packages/{name}/{version}/apt/`, with the key in an
 * `auth.conf.d` file (HTTP Basic). apt runs with a private configuration (APT_CONFIG: its own etc,
 * state, cache and log directories under a temp dir); the machine's apt configuration, sources,
 * keys, lists, dpkg status and caches are neither read nor written. Also: the route holds an
 * admission slot and is paced like `…/content`.
 */
import { spawn } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { APT_TEMPLATE } from './paths.ts';

const MiB = 1024 * 1024;
const PACKAGE = 'arkvory-hello';
const DEB = `${PACKAGE}_1.0_all.deb`;
/** The package version that is the flat apt repository. */
const VERSION_PATH = '/api/v1/repositories/debs/packages/apt/stable';
const PER_PRINCIPAL_BYTES_PER_SECOND = MiB;

function run(
  cmd: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'ENOENT' ? new Error(`${cmd} is not on PATH (see .ci/run's need list)`) : err),
    );
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function must(cmd: string, args: string[], cwd?: string): Promise<string> {
  const r = await run(cmd, args, { cwd });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

/**
 * A private apt: `APT_CONFIG` names a file that moves Dir::Etc (so sources.list, sources.list.d,
 * apt.conf.d, preferences, auth.conf and auth.conf.d are all under `root/etc`, and the machine's
 * /etc/apt/apt.conf.d with its hooks is never read), the state (lists, an empty dpkg status), the
 * cache and the logs under `root`. The sandbox user stays root: `_apt` cannot enter a 0700 temp dir.
 */
async function privateApt(root: string, sourcesLine: string, authConf: string | undefined) {
  const etc = path.join(root, 'etc');
  for (const d of ['apt.conf.d', 'sources.list.d', 'preferences.d', 'trusted.gpg.d', 'auth.conf.d'])
    await mkdir(path.join(etc, d), { recursive: true });
  for (const d of ['state/lists/partial', 'cache/archives/partial', 'log', 'download'])
    await mkdir(path.join(root, d), { recursive: true });
  await writeFile(path.join(root, 'state/status'), '');
  await writeFile(path.join(etc, 'sources.list'), `${sourcesLine}\n`);
  const authFile = path.join(etc, 'auth.conf.d/arkvory.conf');
  const setAuth = async (text: string | undefined) => {
    if (text === undefined) return rm(authFile, { force: true });
    await writeFile(authFile, `${text}\n`, { mode: 0o600 });
    await chmod(authFile, 0o600);
  };
  await setAuth(authConf);
  const config = path.join(root, 'apt-private.conf');
  await writeFile(
    config,
    [
      `Dir::Etc "${etc}/";`,
      `Dir::State "${path.join(root, 'state')}/";`,
      `Dir::State::status "${path.join(root, 'state/status')}";`,
      `Dir::Cache "${path.join(root, 'cache')}/";`,
      `Dir::Log "${path.join(root, 'log')}/";`,
      'APT::Sandbox::User "root";',
      'Acquire::Languages "none";',
      'Acquire::Retries "0";',
      'Acquire::http::Proxy "DIRECT";',
      '',
    ].join('\n'),
  );
  const env: NodeJS.ProcessEnv = { ...process.env, APT_CONFIG: config, LC_ALL: 'C' };
  for (const v of ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'no_proxy', 'NO_PROXY']) delete env[v];
  const aptGet = (args: string[]) => run('apt-get', args, { cwd: path.join(root, 'download'), env });
  return { aptGet, setAuth, downloadDir: path.join(root, 'download') };
}

const db = useTestDatabase();
let gw: GatewayProcess;
let dir: string;
let owner: { key: string };
let reader: { key: string; keyId: string; name: string };
let deb: Buffer;
let packagesFile: string;

beforeAll(async () => {
  await createRepository(db.pool, 'debs');
  owner = await createServiceAccount(db.pool, { name: 'apt-publisher', grants: { debs: 'write' } });
  reader = await createServiceAccount(db.pool, { name: 'apt-ci', scopes: ['read'], grants: { debs: 'read' } });
  // One download per principal at a time (others queue) and a per-principal rate: the apt route
  // must hold a slot and be paced like …/content.
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '1',
      ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(PER_PRINCIPAL_BYTES_PER_SECOND),
    },
    timeoutMs: 60_000,
  });
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-apt-'));

  // A real .deb (a random payload, so the bytes are unique to this run), then the flat index.
  const tree = path.join(dir, 'build', PACKAGE);
  await mkdir(path.join(tree, 'DEBIAN'), { recursive: true });
  await mkdir(path.join(tree, 'usr/share', PACKAGE), { recursive: true });
  await writeFile(
    path.join(tree, 'DEBIAN/control'),
    [
      `Package: ${PACKAGE}`,
      'Version: 1.0',
      'Architecture: all',
      'Maintainer: Arkvory tests <tests@arkvory.invalid>',
      "Description: a tiny package served by Arkvory's apt route",
      '',
    ].join('\n'),
  );
  await writeFile(path.join(tree, 'usr/share', PACKAGE, 'payload.bin'), randomContent(64 * 1024));
  const repo = path.join(dir, 'repo');
  await mkdir(repo);
  await must('dpkg-deb', ['--root-owner-group', '--build', tree, path.join(repo, DEB)]);
  packagesFile = await must('dpkg-scanpackages', ['--multiversion', '.', '/dev/null'], repo);
  await writeFile(path.join(repo, 'Packages'), packagesFile);
  const release = await must('apt-ftparchive', ['release', '.'], repo);
  await writeFile(path.join(repo, 'Release'), release);
  deb = await readFile(path.join(repo, DEB));

  // Uploaded as docs/clients.md shows it: `curl -u ci:$KEY -T <file> …/assets/<file>`.
  for (const name of ['Release', 'Packages', DEB]) {
    const put = await run(
      'curl',
      ['-fsS', '-u', `ci:${owner.key}`, '-T', name, `${gw.url}${VERSION_PATH}/assets/${name}`],
      {
        cwd: repo,
      },
    );
    expect(put.code, `${name}: ${put.stderr}`).toBe(0);
    expect(JSON.parse(put.stdout)).toMatchObject({
      asset: name,
      sizeBytes: (await readFile(path.join(repo, name))).length,
    });
  }
}, 90_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The documented lines (docs/clients.md), for this gateway's origin. */
function documented(origin: URL, key: string) {
  return {
    sources: `deb [trusted=yes] ${origin.origin}${VERSION_PATH}/apt/ ./`,
    auth: `machine http://${origin.host}${VERSION_PATH}/apt/ login apt-ci password ${key}`,
  };
}

function aptRequests(status?: number) {
  return gw
    .logLines()
    .filter((l) => l.msg === 'request' && l.route === APT_TEMPLATE && (status === undefined || l.status === status));
}

/**
 * Request lines cross the gateway's stdout pipe after the answers they log, so apt may be done
 * before they are in: waits (bounded) until there are at least `count` with `status`.
 */
async function aptRequestsReach(status: number, count: number): Promise<void> {
  await waitUntil(() => aptRequests(status).length >= count, {
    what: `${count} request lines of the apt route with status ${status}`,
    timeoutMs: 10_000,
    process: gw,
  });
}

describe('apt with a flat repository on the apt route', () => {
  it('dpkg-scanpackages wrote a Filename relative to the repository base', () => {
    expect(packagesFile).toContain(`Filename: ./${DEB}`);
    expect(packagesFile).toContain(`SHA256: ${sha256(deb)}`);
  });

  it('apt-get update and apt-get download fetch the exact .deb with the key from auth.conf.d (Basic)', async () => {
    const lines = documented(new URL(gw.url), reader.key);
    const apt = await privateApt(path.join(dir, 'apt-ok'), lines.sources, lines.auth);
    const before = aptRequests(200).length;

    const update = await apt.aptGet(['update']);
    expect(update.code, update.stdout + update.stderr).toBe(0);
    expect(update.stdout).toMatch(/Get:\d+ http:\/\/127\.0\.0\.1:\d+\S+ \.\/ Release/);
    expect(update.stdout).toMatch(/Get:\d+ http:\/\/127\.0\.0\.1:\d+\S+ \.\/ Packages/);
    expect(update.stderr).not.toMatch(/^[EW]:/m);

    const download = await apt.aptGet(['download', PACKAGE]);
    expect(download.code, download.stdout + download.stderr).toBe(0);
    expect(await readdir(apt.downloadDir)).toEqual([DEB]);
    const got = await readFile(path.join(apt.downloadDir, DEB));
    expect(got.length).toBe(deb.length);
    expect(got.equals(deb)).toBe(true);

    // Served by the apt route (Release, Packages, the .deb), and InRelease is an honest 404.
    await aptRequestsReach(200, before + 3);
    await aptRequestsReach(404, 1);
    // The key reached no log line (those of these requests are in, waited for above).
    expect(gw.logs()).not.toContain(reader.key.slice(`ark_${reader.keyId}_`.length));

    // A second update sends the conditionals apt keeps (If-Modified-Since): nothing changed.
    const again = await apt.aptGet(['update']);
    expect(again.code, again.stdout + again.stderr).toBe(0);
    expect(again.stdout).toMatch(/Hit:\d+ http:\/\/127\.0\.0\.1:\d+\S+ \.\/ Release/);
    await aptRequestsReach(304, 1);
  });

  it('fails with 401 without credentials, and with a wrong key', async () => {
    const origin = new URL(gw.url);
    const before = aptRequests(401).length;
    const none = await privateApt(path.join(dir, 'apt-none'), documented(origin, '').sources, undefined);
    const r1 = await none.aptGet(['update']);
    expect(r1.code).not.toBe(0);
    expect(r1.stderr).toMatch(
      /E: Failed to fetch http:\/\/127\.0\.0\.1:\d+\S+\/apt\/\.\/Packages {2}401 {2}Unauthorized/,
    );

    // The index fetched with the right key, then the .deb asked for with a wrong one.
    const lines = documented(origin, reader.key);
    const wrong = await privateApt(path.join(dir, 'apt-wrong'), lines.sources, lines.auth);
    const update = await wrong.aptGet(['update']);
    expect(update.code, update.stdout + update.stderr).toBe(0);
    await wrong.setAuth(documented(origin, `ark_${reader.keyId}_${'A'.repeat(43)}`).auth);
    const r2 = await wrong.aptGet(['download', PACKAGE]);
    expect(r2.code).not.toBe(0);
    expect(r2.stdout + r2.stderr).toMatch(new RegExp(`${DEB.replace(/\./g, '\\.')}\\s+401\\s+Unauthorized`));
    expect(await readdir(wrong.downloadDir)).toEqual([]);
    await aptRequestsReach(401, before + 2);
  });
});

describe('the apt route is …/assets/{file}/content at another path', () => {
  it('same bytes, ETag, Range and conditionals; presigned-link parameters are refused', async () => {
    const asset = await request(`${gw.url}${VERSION_PATH}/assets/${DEB}/content`, { headers: bearer(reader.key) });
    const viaApt = await request(`${gw.url}${VERSION_PATH}/apt/${DEB}`, { headers: bearer(reader.key) });
    expect(viaApt.status).toBe(200);
    expect(viaApt.body.equals(deb)).toBe(true);
    expect(viaApt.headers.etag).toBe(asset.headers.etag);
    expect(viaApt.headers['repr-digest']).toBe(asset.headers['repr-digest']);
    const part = await request(`${gw.url}${VERSION_PATH}/apt/./${DEB}`, {
      headers: { ...bearer(reader.key), range: 'bytes=10-19' },
    });
    expect(part.status).toBe(206);
    expect(part.body.equals(deb.subarray(10, 20))).toBe(true);
    const cached = await request(`${gw.url}${VERSION_PATH}/apt/${DEB}`, {
      headers: { ...bearer(reader.key), 'if-none-match': String(viaApt.headers.etag) },
    });
    expect(cached.status).toBe(304);
    const other = await request(`${gw.url}/api/v1/repositories/debs/packages/apt/unstable/apt/Packages`, {
      headers: bearer(reader.key),
    });
    expect(other.status).toBe(404);
    // A link is for one …/content path only: its parameters on the apt route are a 401.
    const link = await request(`${gw.url}${VERSION_PATH}/assets/Packages/presign`, {
      method: 'POST',
      headers: { ...bearer(reader.key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(link.status).toBe(201);
    const query = String(JSON.parse(link.body.toString()).path).split('?')[1];
    expect((await request(`${gw.url}${VERSION_PATH}/assets/Packages/content?${query}`)).status).toBe(200);
    const viaLink = await request(`${gw.url}${VERSION_PATH}/apt/Packages?${query}`);
    expect(viaLink.status).toBe(401);
  });

  it('holds a download admission slot of its principal and is paced like …/content', async () => {
    const big = randomContent(2 * MiB);
    const bigPath = `${VERSION_PATH}/assets/big.bin`;
    const put = await request(`${gw.url}${bigPath}`, {
      method: 'PUT',
      headers: { ...bearer(owner.key), 'content-digest': contentDigest(big) },
      body: big,
    });
    expect(put.status).toBe(201);
    const url = `${gw.url}${VERSION_PATH}/apt/big.bin`;
    const started = Date.now();
    const timed = () =>
      new Promise<{ headersAt: number; endAt: number; body: Buffer }>((resolve, reject) => {
        http
          .get(url, { headers: bearer(reader.key), agent: false }, (res) => {
            const headersAt = Date.now() - started;
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ headersAt, endAt: Date.now() - started, body: Buffer.concat(chunks) }));
            res.on('error', reject);
          })
          .on('error', reject);
      });
    const first = timed();
    await sleep(200);
    const second = timed();
    const [a, b] = await Promise.all([first, second]);
    expect(a.body.equals(big)).toBe(true);
    expect(b.body.equals(big)).toBe(true);
    // Paced: 2 MiB at 1 MiB/s (a 100 KiB burst) takes about 1.9 s.
    expect(a.endAt).toBeGreaterThanOrEqual(1500);
    // The principal's only slot was held: the second answer started once the first was done.
    expect(b.headersAt).toBeGreaterThanOrEqual(1500);
    expect(b.headersAt).toBeGreaterThanOrEqual(a.endAt - 100);
  });
});
