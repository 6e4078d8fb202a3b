/**
 * deploy/systemd/arkvory-backup.service run as installed, against a real PostgreSQL and Redis: the
 * command of its ExecStart= with exactly the environment the unit gives (its EnvironmentFile=
 * examples, Environment= lines and LoadCredential= files), on a database set up as docs/deploy.md
 * says (`arkvory db roles`, then one login per group role, each with its password in
 * /etc/arkvory/credentials/<role>-database-password). Only the addresses are the test's: the
 * database and Redis, the data dir, the backup directory and /etc/arkvory.
 */
import { randomBytes } from 'node:crypto';
import { chmod, copyFile, mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { DATABASE_ROLES, type DatabaseRole } from '../../migrations/grants.ts';
import { type CertificateAuthority, createCertificateAuthority, issueServerCertificate } from '../harness/tls-certs.ts';
import { bearer, createRepository, createServiceAccount } from '../support/auth.ts';
import { randomContent, request } from '../support/content.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { installRoleLogins, poolFor } from '../support/database-roles.ts';
import { DEPLOY, documentedLogins, loadCredentials, service, unit, unitEnvironment } from '../support/deploy-files.ts';
import { makeTempDir, runCli, startGateway } from '../support/gateway.ts';

const INSTALLED = '/etc/arkvory/';
let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;
let redisUser: { name: string; password: string };
let dataDir: string;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
  redisUser = { name: `arkvory_t_${randomBytes(4).toString('hex')}`, password: randomBytes(12).toString('hex') };
  const redis = new Redis(inject('redisUrl'), { lazyConnect: true });
  await redis.connect();
  try {
    await redis.call('ACL', 'SETUSER', redisUser.name, 'on', `>${redisUser.password}`, '~*', '&*', '+@all');
  } finally {
    redis.disconnect();
  }
  // A store with one artifact, made by the writer as its own login.
  const pool = poolFor(urls.writer);
  let key: string;
  try {
    await createRepository(pool, 'bk');
    ({ key } = await createServiceAccount(pool, { grants: { bk: 'write' } }));
  } finally {
    await pool.end();
  }
  const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: urls.writer } });
  const put = await request(`${writer.url}/api/v1/repositories/bk/artifacts/a.bin`, {
    method: 'PUT',
    headers: bearer(key),
    body: randomContent(64 * 1024),
  });
  expect(put.status, put.body.toString()).toBe(201);
  dataDir = writer.dataDir;
  await writer.stop('SIGTERM');
}, 90_000);

afterAll(async () => {
  await db?.drop();
  if (redisUser === undefined) return;
  const redis = new Redis(inject('redisUrl'), { lazyConnect: true });
  await redis.connect();
  await redis.call('ACL', 'DELUSER', redisUser.name).catch(() => {});
  redis.disconnect();
});

/** What the operator put under /etc/arkvory/credentials (docs/deploy.md), by file name. */
function credentialFiles(): Map<string, string> {
  const files = new Map<string, string>();
  for (const role of DATABASE_ROLES)
    files.set(`${role}-database-password`, decodeURIComponent(new URL(urls[role]).password));
  files.set('redis-password', redisUser.password);
  files.set('metrics-token', randomBytes(12).toString('hex'));
  return files;
}

/**
 * The files of /etc/arkvory the environment names, installed under `root`: TLS material signed by
 * one internal CA, the rate-limit file of the example. Returns the value with the path moved there.
 */
async function installFile(value: string, root: string, ca: () => Promise<CertificateAuthority>): Promise<string> {
  const relative = value.slice(INSTALLED.length);
  const target = path.join(root, relative);
  await mkdir(path.dirname(target), { recursive: true });
  if (relative === 'rate_limits.yaml') await copyFile(path.join(DEPLOY, 'rate_limits.example.yaml'), target);
  else if (relative.startsWith('tls/')) {
    const name = path.basename(relative).replace(/\.(crt|key)$/, '');
    if (name.endsWith('-ca')) await copyFile((await ca()).certFile, target);
    else {
      const issued = await issueServerCertificate(await ca(), await makeTempDir('arkvory-tls-'), name);
      await copyFile(relative.endsWith('.key') ? issued.keyFile : issued.certFile, target);
      await chmod(target, 0o600);
    }
  } else throw new Error(`the unit names ${value}, which the installation steps do not make`);
  return target;
}

it('arkvory-backup.service makes a backup with exactly the environment and credentials the unit gives', async () => {
  const u = await unit('arkvory-backup.service');
  const root = await makeTempDir('arkvory-etc-');
  const credentials = path.join(root, 'run-credentials');
  await mkdir(credentials, { mode: 0o700 });
  const env = await unitEnvironment(u, '1', credentials);

  // LoadCredential=: systemd copies each host file to %d/<name>, 0400, before the process starts.
  const host = credentialFiles();
  for (const { name, source } of loadCredentials(u)) {
    expect(source.startsWith(`${INSTALLED}credentials/`), source).toBe(true);
    const content = host.get(path.basename(source));
    expect(content, `${source}: a credential docs/deploy.md has the operator make`).toBeDefined();
    await writeFile(path.join(credentials, name), `${content}\n`, { mode: 0o400 });
  }

  // The addresses of the example become the test's; the login stays the one the unit names, made
  // as docs/deploy.md says (the test's login of that group role).
  const logins = await documentedLogins();
  const database = new URL(env.ARKVORY_DATABASE_URL!);
  const group = logins.get(decodeURIComponent(database.username));
  expect(group, `${database.username}: a login docs/deploy.md creates`).toBeDefined();
  const login = new URL(urls[group!.replace(/^arkvory_/, '') as DatabaseRole]);
  login.password = database.password;
  env.ARKVORY_DATABASE_URL = login.toString();
  if (env.ARKVORY_REDIS_URL !== undefined) {
    const redis = new URL(env.ARKVORY_REDIS_URL);
    const harness = new URL(inject('redisUrl'));
    redis.host = harness.host;
    redis.username = redisUser.name;
    env.ARKVORY_REDIS_URL = redis.toString();
  }
  // It backs up the writer's store and writes only where the unit may write.
  const writerEnv = await unitEnvironment(await unit('arkvory-writer.service'), '1');
  expect(env.ARKVORY_DATA_DIR).toBe(writerEnv.ARKVORY_DATA_DIR);
  env.ARKVORY_DATA_DIR = dataDir;
  expect(service(u, 'ReadWritePaths')).toContain(env.BACKUP_DIR);
  const backups = await makeTempDir('arkvory-backups-');
  env.BACKUP_DIR = backups;
  let internalCa: Promise<CertificateAuthority> | undefined;
  const ca = () =>
    (internalCa ??= makeTempDir('arkvory-ca-').then((dir) => createCertificateAuthority(dir, 'internal')));
  for (const [name, value] of Object.entries(env))
    if (value.startsWith(INSTALLED)) env[name] = await installFile(value, root, ca);

  // ExecStart= with systemd's ${VAR} expansion, run by the project's node as the unit runs it.
  const [node, script, ...args] = service(u, 'ExecStart')[0]!.split(' ');
  expect([node, script]).toEqual(['/opt/arkvory/node_modules/.bin/node', '/opt/arkvory/bin/arkvory.js']);
  const expanded = args.map((arg) => arg.replace(/\$\{(\w+)\}/g, (_, name: string) => env[name] ?? ''));
  const result = await runCli(expanded, env);
  expect(result.code, result.stderr).toBe(0);
  const summary = JSON.parse(result.stdout) as { backup: string; blobs: { count: number } };
  expect(summary.blobs.count).toBe(1);
  expect(await readdir(backups)).toContain(path.basename(summary.backup));
}, 120_000);
