import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { localHostName } from '../../storage-adapter/backup/backup-dir.ts';
import { sealManifest, type BackupManifest } from '../../storage-adapter/backup/manifest.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { CLI, makeTempDir, ROOT, runCli, startGateway } from '../../test/support/gateway.ts';
import { holdRestoreBeforeCommit, killRestoreBeforeCommit } from '../../test/support/killed-restore.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { listKeys } from '../../test/support/s3-server.ts';
import { ALL_STORE_KINDS, startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';
import { runProcess, waitForSliceFills } from '../../test/harness/index.ts';

const KiB = 1024;
const source = useTestDatabase();
const redis = useTestRedis();
const drops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const drop of drops.splice(0)) await drop();
});

const blobName = (hex: string) => `blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`;
const bodies = [0, 1, 2, 3, 4].map((i) => randomContent(48 * KiB + i));
/** Blobs are restored in sha256 order: the last one is written after all the others. */
const lastBlob = bodies.map(sha256).sort().at(-1)!;
let backup: string;
let storageId: string;
let readerKey: string;

/** One backup of an installation with five artifacts, a service account and rule documents kept in Redis. */
beforeAll(async () => {
  await createRepository(source.pool, 'rt');
  const writer = await createServiceAccount(source.pool, { grants: { rt: 'write' } });
  readerKey = writer.key;
  const env = {
    ARKVORY_DATABASE_URL: source.url,
    ARKVORY_REDIS_URL: redis.url,
    ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}src:`,
  };
  const gw = await startGateway({ env });
  for (const [i, body] of bodies.entries()) {
    const put = await request(`${gw.url}/api/v1/repositories/rt/artifacts/a${i}.bin`, {
      method: 'PUT',
      headers: bearer(writer.key),
      body,
    });
    expect(put.status, put.body.toString()).toBe(201);
  }
  await gw.stop('SIGTERM');
  // Two blobs as if published before slice digests were recorded: the backup holds none for them.
  await source.pool.query('DELETE FROM arkvory_blob_slices WHERE sha256 = ANY($1::text[])', [
    bodies.slice(0, 2).map(sha256),
  ]);
  const rules = path.join(await makeTempDir('arkvory-rules-'), 'publish.yaml');
  await writeFile(
    rules,
    'rate_limits:\n  transfer_bytes:\n    - name: bytes_per_principal_per_day\n      action: limit\n      characteristics: [principal]\n      limit: 10000000000\n      period_s: 86400\n',
  );
  const sourceEnv = { ...env, ARKVORY_DATA_DIR: gw.dataDir };
  const published = await runCli(['ratelimit', 'publish', rules], sourceEnv);
  expect(published.code, published.stderr).toBe(0);
  const made = await runCli(['backup', await makeTempDir('arkvory-backups-')], sourceEnv);
  expect(made.code, made.stderr).toBe(0);
  const summary = JSON.parse(made.stdout) as { backup: string; blobs: { count: number }; ruleDocuments: number };
  expect(summary.blobs.count).toBe(bodies.length);
  expect(summary.ruleDocuments).toBeGreaterThan(0);
  backup = summary.backup;
  storageId = (await source.pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage')).rows[0]!.id;
}, 120_000);

/**
 * A copy of the backup whose database file `edit` rewrote, its manifest resealed to match (as whoever
 * edits a backup can do): only the contents can tell it is wrong.
 */
async function editedBackup(edit: (text: string) => string): Promise<string> {
  const dir = path.join(await makeTempDir('arkvory-edited-'), path.basename(backup));
  await cp(backup, dir, { recursive: true });
  const database = Buffer.from(edit(await readFile(path.join(dir, 'database.jsonl'), 'utf8')));
  await writeFile(path.join(dir, 'database.jsonl'), database);
  const { sha256: _seal, ...fields } = JSON.parse(
    await readFile(path.join(dir, 'manifest.json'), 'utf8'),
  ) as BackupManifest & {
    sha256: string;
  };
  const manifest = { ...fields, database: { ...fields.database, bytes: database.length, sha256: sha256(database) } };
  await writeFile(path.join(dir, 'manifest.json'), sealManifest(manifest));
  return dir;
}

/** Rows in every Arkvory table but the migrations' own. */
async function tableRows(db: TestDatabase): Promise<Record<string, number>> {
  const { rows } = await db.pool.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'arkvory\\_%' AND tablename <> 'arkvory_schema_migrations' ORDER BY 1`,
  );
  const counts: Record<string, number> = {};
  for (const { name } of rows)
    counts[name] = (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${name}"`)).rows[0]!.n;
  return counts;
}

describe('a backup the caller may not read', () => {
  it('is said as EACCES, not called damaged (backup_invalid)', async () => {
    expect(process.getuid?.(), 'runs as root: it runs the CLI as user nobody with setpriv').toBe(0);
    // A copy whose directories anyone may enter, its files as a backup leaves them (0600 database file).
    const parent = await makeTempDir('arkvory-unreadable-');
    const copy = path.join(parent, path.basename(backup));
    await cp(backup, copy, { recursive: true });
    await chmod(parent, 0o755);
    for (const entry of await readdir(copy, { recursive: true, withFileTypes: true }))
      if (entry.isDirectory()) await chmod(path.join(entry.parentPath, entry.name), 0o755);
    await chmod(copy, 0o755);
    await chmod(path.join(copy, 'manifest.json'), 0o644);
    const verifyAsNobody = () =>
      runProcess(
        'setpriv',
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          '--inh-caps=-all',
          '--',
          process.execPath,
          CLI,
          'restore',
          '--verify',
          copy,
        ],
        {
          env: { PATH: process.env.PATH },
          cwd: ROOT,
        },
      );
    for (const unreadable of ['database.jsonl', 'rule-documents.json']) {
      for (const file of ['database.jsonl', 'rule-documents.json'])
        await chmod(path.join(copy, file), file === unreadable ? 0o600 : 0o644);
      const refused = await verifyAsNobody();
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        new RegExp(`^arkvory restore --verify: EACCES: permission denied, open '.*/${unreadable.replace('.', '\\.')}'`),
      );
      expect(refused.stderr).not.toContain('backup_invalid');
    }
  }, 60_000);
});

describe('a backup a restore refuses', () => {
  /** A copy of the backup with `change` made to it, its manifest resealed when `reseal` edits the manifest's fields. */
  async function changed(
    change: (dir: string) => Promise<void>,
    reseal?: (manifest: BackupManifest) => BackupManifest,
  ): Promise<string> {
    const dir = path.join(await makeTempDir('arkvory-refused-'), path.basename(backup));
    await cp(backup, dir, { recursive: true });
    await change(dir);
    if (reseal) {
      const { sha256: _seal, ...fields } = JSON.parse(
        await readFile(path.join(dir, 'manifest.json'), 'utf8'),
      ) as BackupManifest & { sha256: string };
      await writeFile(path.join(dir, 'manifest.json'), sealManifest(reseal(fields)));
    }
    return dir;
  }

  it('leaves the target as it was: an empty database without a table, an embedded one not even made', async () => {
    const db = await createTestDatabase({ migrated: false });
    drops.push(db.drop);
    const ourTables = async () =>
      (
        await db.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = current_schema()',
        )
      ).rows[0]!.n;
    expect(await ourTables()).toBe(0);
    const nowhere = async () => path.join(await makeTempDir(), 'data');
    const cases: Array<[string, string, RegExp]> = [
      [
        'an edited manifest',
        await changed(async (dir) => {
          const file = path.join(dir, 'manifest.json');
          await writeFile(file, (await readFile(file, 'utf8')).replace(/"snapshotTime": "\d/, '"snapshotTime": "1'));
        }),
        /backup_invalid: .*manifest\.json does not match its own sha256/,
      ],
      [
        'a newer schema',
        await changed(
          async () => {},
          (m) => ({ ...m, schemaVersion: 99_999 }),
        ),
        /schema_newer: the backup was made at schema version 99999/,
      ],
      [
        'a missing database file',
        await changed((dir) => rm(path.join(dir, 'database.jsonl'))),
        /backup_invalid: .*database\.jsonl is missing/,
      ],
      [
        'a tampered database file',
        await changed(async (dir) => {
          const file = path.join(dir, 'database.jsonl');
          await writeFile(file, (await readFile(file, 'utf8')).replace('"arkvory_principals"', '"arkvory_principalz"'));
        }),
        /backup_invalid: .*database\.jsonl does not match the manifest/,
      ],
    ];
    for (const [what, dir, reason] of cases) {
      const dataDir = await nowhere();
      const refused = await runCli(['restore', dir], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir });
      expect([refused.code, refused.stdout], what).toEqual([1, '']);
      expect(refused.stderr, what).toMatch(new RegExp(`^arkvory restore: ${reason.source}`));
      expect(await ourTables(), `${what}: no table made in the target database`).toBe(0);
      expect(existsSync(dataDir), `${what}: no storage root made`).toBe(false);
    }
    // The embedded default: not made, not started.
    const dataDir = await nowhere();
    const embedded = await runCli(['restore', cases[1]![1]], { ARKVORY_DATA_DIR: dataDir });
    expect([embedded.code, embedded.stdout]).toEqual([1, '']);
    expect(embedded.stderr).toMatch(/^arkvory restore: schema_newer: /);
    expect(existsSync(dataDir), 'no data directory, no embedded cluster made').toBe(false);
  }, 60_000);
});

describe.each(ALL_STORE_KINDS)('restore into the %s store', (kind) => {
  let backing: StoreBacking;
  beforeAll(async () => {
    backing = await startStoreBacking(kind);
  }, 120_000);

  /** A fresh, unmigrated database and an empty store root. */
  async function freshTarget() {
    const db = await createTestDatabase({ migrated: false });
    drops.push(db.drop);
    const dataDir = await makeTempDir();
    await backing.reset(dataDir);
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir, ...backing.env };
    const probe = backing.probe(dataDir);
    /** Every object (S3) or file (a directory, nginx's root) of the store, by relative name. */
    const objects = async (): Promise<string[]> => {
      if (backing.s3) return listKeys(backing.s3);
      const root = backing.nginx?.root ?? dataDir;
      const names: string[] = [];
      for (const entry of await readdir(root, { recursive: true, withFileTypes: true }))
        if (!entry.isDirectory()) names.push(path.relative(root, path.join(entry.parentPath, entry.name)));
      return names.sort();
    };
    return { db, env, probe, objects };
  }

  it('refuses a root that holds blobs but no storage-id before writing anything', async () => {
    const target = await freshTarget();
    const stray = randomContent(1000);
    await target.probe.write(blobName(sha256(stray)), stray);
    const before = await target.objects();
    expect(before).toEqual([blobName(sha256(stray))]);

    const refused = await runCli(['restore', backup], target.env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^arkvory restore: target_not_empty: the target storage root .* holds blobs/);
    expect(await target.probe.read('storage-id')).toBeUndefined();
    expect(await target.objects(), 'nothing written to the store').toEqual(before);
    expect(await target.probe.list('tmp')).toEqual([]);
    const rows = await tableRows(target.db);
    expect(rows.arkvory_storage).toBe(0);
    expect(rows.arkvory_artifacts).toBe(0);

    // Only a storage-id (a root some writer once bound): refused just the same, and it stays as it was.
    await backing.reset(target.env.ARKVORY_DATA_DIR);
    const foreignId = '00000000-0000-4000-8000-000000000000\n';
    await target.probe.write('storage-id', foreignId);
    const again = await runCli(['restore', backup], target.env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('target_not_empty');
    expect(again.stderr).toContain('it has a storage-id');
    expect((await target.probe.read('storage-id'))?.toString()).toBe(foreignId);
    expect(await target.objects()).toEqual(['storage-id']);
    expect((await tableRows(target.db)).arkvory_storage).toBe(0);
  }, 90_000);

  it('refuses an edited backup (a blob named by a path, a line that is not JSON) before writing anything', async () => {
    const target = await freshTarget();
    const traversal = await editedBackup((text) =>
      text
        .split('\n')
        .map((line) =>
          line.includes('"arkvory_artifacts"') ? line.replace(lastBlob, '../../../../etc/cron.d/x') : line,
        )
        .join('\n'),
    );
    const cut = await editedBackup(
      (text) => `${text.slice(0, text.lastIndexOf('{"table":"arkvory_artifacts"') + 40)}\n`,
    );
    for (const [edited, reason] of [
      [
        traversal,
        /database\.jsonl line \d+ names blob "\.\.\/\.\.\/\.\.\/\.\.\/etc\/cron\.d\/x", which is not a sha256/,
      ],
      [cut, /database\.jsonl line \d+ is not JSON/],
    ] as const) {
      const checked = await runCli(['restore', '--verify', edited], {});
      expect(checked.code).toBe(1);
      expect(checked.stderr).toMatch(/^arkvory restore --verify: backup_invalid: /);
      expect(checked.stderr).toMatch(reason);
      const refused = await runCli(['restore', edited], target.env);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/^arkvory restore: backup_invalid: /);
      expect(refused.stderr).toMatch(reason);
      expect(refused.stderr).not.toContain('rolled back');
      expect(await target.objects(), 'nothing written to the store').toEqual([]);
      expect((await tableRows(target.db)).arkvory_storage ?? 0).toBe(0);
    }
  }, 90_000);

  it('refuses a backup whose database file was cut short, and rolls back one whose blob was replaced by other bytes of its size', async () => {
    const target = await freshTarget();
    const cut = path.join(await makeTempDir('arkvory-cut-'), path.basename(backup));
    await cp(backup, cut, { recursive: true });
    const database = path.join(cut, 'database.jsonl');
    const text = await readFile(database);
    await writeFile(database, text.subarray(0, text.length - 100));
    const refused = await runCli(['restore', cut], target.env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^arkvory restore: backup_invalid: .*database\.jsonl does not match the manifest/m);
    expect(await target.objects()).toEqual([]);
    // A link to /dev/zero in its place is refused at once, not read without end: checked before the
    // target store is opened, so the same on every store (a named pipe: verify.test.ts).
    if (kind === 'fs') {
      await rm(database);
      await symlink('/dev/zero', database);
      const endless = await runCli(['restore', cut], target.env);
      expect([endless.code, endless.stdout]).toEqual([1, '']);
      // A link is refused as one (a backup writes none), before what it leads to is looked at.
      expect(endless.stderr).toMatch(
        /^arkvory restore: backup_invalid: .*database\.jsonl is not a regular file \(a symbolic link\)$/m,
      );
      expect(await target.objects()).toEqual([]);
      // Refused before the target database was touched: not even migrated.
      expect(await tableRows(target.db)).toEqual({});
    }

    const replaced = path.join(await makeTempDir('arkvory-replaced-'), path.basename(backup));
    await cp(backup, replaced, { recursive: true });
    const victim = bodies.map(sha256).sort()[2]!;
    await writeFile(
      path.join(replaced, blobName(victim)),
      randomContent(bodies.find((b) => sha256(b) === victim)!.length),
    );
    const corrupt = await runCli(['restore', replaced], target.env);
    expect(corrupt.code).toBe(1);
    expect(corrupt.stderr).toContain(`blob_corrupt: blob ${victim} in the backup does not match its size or sha256`);
    expect(corrupt.stderr).toContain('the restore was rolled back');
    expect(await target.objects()).toEqual([]);
    expect((await tableRows(target.db)).arkvory_artifacts).toBe(0);
  }, 90_000);

  it('a restore killed partway leaves a root no gateway starts on; the same restore run again completes', async () => {
    const target = await freshTarget();
    // Killed in its transaction: every blob already in the store, nothing committed.
    await killRestoreBeforeCommit(backup, target.env, target.db.url);
    const written = (await target.objects()).filter((n) => n.startsWith('blobs/'));
    expect(written).toHaveLength(bodies.length);

    // Part of a backup and no installation: a gateway refuses the root instead of starting a fresh one on it.
    const started = await startGateway({ env: target.env, dataDir: target.env.ARKVORY_DATA_DIR }).then(
      async (gw) => {
        await gw.stop();
        return undefined;
      },
      (err: Error) => err,
    );
    expect(started, 'a gateway started on a half-restored root').toBeInstanceOf(Error);
    expect(started?.message).toContain('marks a restore that did not finish');
    expect((await tableRows(target.db)).arkvory_storage).toBe(0);

    // The same restore again, from the good backup: it removes what the killed one wrote and completes.
    const again = await runCli(['restore', backup], target.env);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({
      storageId,
      blobs: { count: bodies.length },
      scrub: { corrupt: [] },
    });
    expect((await target.probe.read('storage-id'))?.toString().trim()).toBe(storageId);
    expect((await target.objects()).filter((n) => n.startsWith('blobs/')).sort()).toEqual(
      bodies.map((b) => blobName(sha256(b))).sort(),
    );
    const gw = await startGateway({ env: target.env, dataDir: target.env.ARKVORY_DATA_DIR });
    try {
      const res = await request(`${gw.url}/api/v1/repositories/rt/artifacts/a0.bin/content`, {
        headers: bearer(readerKey),
      });
      expect(res.status).toBe(200);
      expect(res.body.equals(bodies[0]!)).toBe(true);
    } finally {
      await gw.stop();
    }

    // A backup of the restored installation writes none of its credentials (the database password,
    // the S3 secret key) into its files or its output.
    const made = await runCli(['backup', await makeTempDir('arkvory-backups-')], target.env);
    expect(made.code, made.stderr).toBe(0);
    const s3Secret = (target.env as Record<string, string | undefined>).AWS_SECRET_ACCESS_KEY;
    const secrets = [new URL(target.env.ARKVORY_DATABASE_URL).password, s3Secret].filter(
      (v): v is string => v !== undefined && v !== '',
    );
    if (backing.s3) expect(s3Secret, 'the S3 store is reached with a secret key').toBeTruthy();
    const backupDir = (JSON.parse(made.stdout) as { backup: string }).backup;
    const texts = [made.stdout, made.stderr];
    for (const file of ['manifest.json', 'database.jsonl', 'rule-documents.json'])
      texts.push(await readFile(path.join(backupDir, file), 'utf8').catch(() => ''));
    for (const secret of secrets) for (const text of texts) expect(text).not.toContain(secret);
  }, 120_000);

  it('a restore that fails partway leaves the database and the store empty; a retry succeeds', async () => {
    const target = await freshTarget();
    // Migrated and empty, as the restore finds it: what it must look like after a failed restore too.
    expect((await runCli(['migrate'], target.env)).code).toBe(0);
    const empty = await tableRows(target.db);

    // 1. A blob removed from the backup after it was sealed: the one restored last, so every other
    //    blob is already in the store when the restore fails.
    const damaged = path.join(await makeTempDir('arkvory-damaged-'), path.basename(backup));
    await cp(backup, damaged, { recursive: true });
    await rm(path.join(damaged, blobName(lastBlob)));
    const missing = await runCli(['restore', damaged], target.env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`blob_missing: the backup lacks blob ${lastBlob}`);
    expect(missing.stderr).toContain('the restore was rolled back: the target database and storage root are empty');
    expect(await target.objects(), 'every blob the failed restore wrote is gone').toEqual([]);
    expect(await target.probe.read('storage-id')).toBeUndefined();
    expect(await tableRows(target.db)).toEqual(empty);

    //    The same blob as a named pipe: refused at its open, without waiting for a writer, and rolled back.
    await promisify(execFile)('mkfifo', [path.join(damaged, blobName(lastBlob))]);
    const pipe = await runCli(['restore', damaged], target.env);
    expect(pipe.code).toBe(1);
    expect(pipe.stderr).toContain(`backup_invalid: ${path.join(damaged, blobName(lastBlob))} is not a regular file`);
    expect(pipe.stderr).toContain('the restore was rolled back: the target database and storage root are empty');
    expect(await target.objects(), 'every blob the failed restore wrote is gone').toEqual([]);
    expect(await target.probe.read('storage-id')).toBeUndefined();
    expect(await tableRows(target.db)).toEqual(empty);

    // 2. Every blob and table in, then the target's Redis (where the backed-up rule documents go)
    //    refuses the write (a login that may read but not run scripts): the transaction is rolled back
    //    and the blobs and the storage-id removed.
    const user = `arkvory-restore-${kind}-${redis.prefix.split(':')[2]}`;
    await redis.client.call('ACL', 'SETUSER', user, 'on', '>restore-pw', '~*', '+@all', '-@scripting');
    onTestFinished(async () => {
      await redis.client.call('ACL', 'DELUSER', user);
    });
    const refusing = new URL(redis.url);
    refusing.username = user;
    refusing.password = 'restore-pw';
    const redisRefuses = {
      ...target.env,
      ARKVORY_REDIS_URL: refusing.href,
      ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}x:`,
    };
    const late = await runCli(['restore', backup], redisRefuses);
    expect(late.code).toBe(1);
    expect(late.stderr).toContain('store_unavailable');
    expect(late.stderr).toContain('the restore was rolled back');
    expect(await target.objects()).toEqual([]);
    expect(await tableRows(target.db)).toEqual(empty);

    // 3. The same target, the good backup: restored, scrubbed clean, bound to the backed-up storage id.
    const good = await runCli(['restore', backup], target.env);
    expect(good.code, good.stderr).toBe(0);
    const summary = JSON.parse(good.stdout) as {
      storageId: string;
      blobs: { count: number };
      ruleDocuments: number;
      scrub: { checked: number; corrupt: unknown[] };
    };
    expect(summary).toMatchObject({ storageId, blobs: { count: bodies.length }, scrub: { corrupt: [] } });
    expect(summary.scrub.checked).toBe(bodies.length);
    expect((await target.probe.read('storage-id'))?.toString().trim()).toBe(storageId);
    const names = (await target.objects()).filter((n) => n.startsWith('blobs/')).sort();
    expect(names).toEqual(bodies.map((b) => blobName(sha256(b))).sort());
    const rows = await tableRows(target.db);
    expect(rows.arkvory_artifacts).toBe(bodies.length);
    expect(rows.arkvory_storage).toBe(1);
    // The Redis rule documents went into the database (no Redis here), inside the restore's transaction.
    expect(rows.arkvory_rate_limit_rules).toBe(summary.ruleDocuments);
    // Every restored blob has slice digests, those the backup lacked too (one slice each: its sha256).
    const slices = await target.db.pool.query<{ sha256: string; digests: Buffer }>(
      'SELECT sha256, digests FROM arkvory_blob_slices ORDER BY sha256',
    );
    expect(slices.rows.map((r) => [r.sha256, r.digests.toString('hex')])).toEqual(
      bodies.map((b) => [sha256(b), sha256(b)]).sort(([a], [b]) => (a! < b! ? -1 : 1)),
    );
    if (kind === 'fs') return;
    // A remote store's slice cache serves a blob whose digests only the restore recorded: kept on disk.
    const cacheDir = await makeTempDir('arkvory-restored-cache-');
    const gw = await startGateway({
      env: {
        ...target.env,
        ARKVORY_CACHE_DIR: cacheDir,
        ARKVORY_CACHE_MIN_FREE_BYTES: '0',
        ARKVORY_BLOB_CACHE_BYTES: '0',
      },
    });
    try {
      const res = await request(`${gw.url}/api/v1/repositories/rt/artifacts/a0.bin/content`, {
        headers: bearer(readerKey),
      });
      expect(res.status).toBe(200);
      expect(res.body.equals(bodies[0]!)).toBe(true);
      // A verified slice is served from memory and lands on disk just after.
      await waitForSliceFills(gw.url);
      const held = await readdir(path.join(cacheDir, 'slices'), { recursive: true });
      expect(held.some((f) => f.endsWith(`${sha256(bodies[0]!)}-${8 * 1024 * 1024}-0`))).toBe(true);
      const metrics = await (await fetch(`${gw.url}/metrics`)).text();
      expect(metrics).toMatch(/arkvory_slice_cache_requests_total\{result="miss"\} 1/);
      expect(metrics).not.toMatch(/arkvory_slice_cache_requests_total\{result="bypass"\} [1-9]/);
    } finally {
      await gw.stop();
    }
  }, 120_000);
});

describe('a restore that cannot empty what a killed restore left (directory store)', () => {
  it('keeps the mark until the root is empty, so the same restore run again still takes the root up', async () => {
    const db = await createTestDatabase({ migrated: false });
    drops.push(db.drop);
    const dataDir = await makeTempDir();
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir };
    await killRestoreBeforeCommit(backup, env, db.url);
    // The blob restored first is in the root; its directory read-only (a bind mount) stands for an
    // emptying cut short (a kill, an I/O error) with part of the blobs still there.
    const firstBlob = bodies.map(sha256).sort()[0]!;
    const stuck = path.dirname(path.join(dataDir, blobName(firstBlob)));
    const exec = promisify(execFile);
    await exec('mount', ['--bind', stuck, stuck]);
    let mounted = true;
    const unmount = async () => {
      if (mounted) await exec('umount', [stuck]);
      mounted = false;
    };
    onTestFinished(unmount);
    await exec('mount', ['-o', 'remount,bind,ro', stuck]);

    const cutShort = await runCli(['restore', backup], env);
    expect(cutShort.code).toBe(1);
    expect(cutShort.stderr).toMatch(/^arkvory restore: target_busy: .*not all of it could be removed/);
    expect(cutShort.stderr.trim().split('\n')).toHaveLength(1);
    expect(cutShort.stderr).toContain('the same restore run again');
    expect(await readFile(path.join(dataDir, blobName(firstBlob))), 'the blob it could not remove').toBeTruthy();
    expect(await readFile(path.join(dataDir, 'storage-id'), 'utf8')).toMatch(/^restoring /);

    // The cause gone, the same restore takes the marked root up again and completes.
    await unmount();
    const again = await runCli(['restore', backup], env);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({
      storageId,
      blobs: { count: bodies.length },
      scrub: { corrupt: [] },
    });
    expect((await readFile(path.join(dataDir, 'storage-id'), 'utf8')).trim()).toBe(storageId);
  }, 120_000);
});

describe('a restore into a root another restore on this host is still writing (directory store)', () => {
  it('is refused (target_busy) without removing what the running one wrote, though its database is another', async () => {
    const running = await createTestDatabase({ migrated: false });
    const other = await createTestDatabase({ migrated: false });
    drops.push(running.drop, other.drop);
    const dataDir = await makeTempDir();
    // Held in its transaction: every blob written under its mark, nothing committed yet.
    const held = await holdRestoreBeforeCommit(
      backup,
      { ARKVORY_DATABASE_URL: running.url, ARKVORY_DATA_DIR: dataDir },
      running.url,
    );
    onTestFinished(() => held.kill());
    const blobs = async () =>
      (await readdir(path.join(dataDir, 'blobs'), { recursive: true, withFileTypes: true })).filter((e) => e.isFile())
        .length;
    expect(await blobs()).toBe(bodies.length);

    // The same root with another (empty) database: its barrier does not cover the running restore.
    const second = await runCli(['restore', backup], { ARKVORY_DATABASE_URL: other.url, ARKVORY_DATA_DIR: dataDir });
    expect(second.code).toBe(1);
    expect(second.stderr).toMatch(/^arkvory restore: target_busy: .*is being restored by process \d+ on this host/);
    expect(second.stderr).toContain(`process ${held.pid} `);
    expect(second.stderr.trim().split('\n')).toHaveLength(1);
    expect(await blobs(), "the running restore's blobs").toBe(bodies.length);
    expect(await readFile(path.join(dataDir, 'storage-id'), 'utf8')).toMatch(
      new RegExp(`^restoring ${storageId} \\S+ ${held.pid} [0-9a-f-]+\n`),
    );
    expect((await tableRows(other)).arkvory_storage).toBe(0);
  }, 120_000);

  it('takes up a mark whose pid is now another program’s (a killed restore’s pid reused)', async () => {
    const db = await createTestDatabase({ migrated: false });
    drops.push(db.drop);
    const dataDir = await makeTempDir();
    const [first] = bodies;
    await mkdir(path.dirname(path.join(dataDir, blobName(sha256(first!)))), { recursive: true });
    await writeFile(path.join(dataDir, blobName(sha256(first!))), first!);
    // This test process is alive on this host and no restore.
    await writeFile(path.join(dataDir, 'storage-id'), `restoring ${storageId} ${localHostName()} ${process.pid}\n`);
    const again = await runCli(['restore', backup], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir });
    expect(again.code, again.stderr).toBe(0);
    expect((await readFile(path.join(dataDir, 'storage-id'), 'utf8')).trim()).toBe(storageId);
  }, 120_000);
});

describe('a backup holding symbolic links (as `cp -s` makes: the bytes elsewhere, in the live store say)', () => {
  /** A copy of the backup in which `relative` (a blob or a directory of its path) is a link to its bytes moved outside. */
  async function linkedCopy(relative: string): Promise<string> {
    const dir = path.join(await makeTempDir('arkvory-linked-'), path.basename(backup));
    await cp(backup, dir, { recursive: true });
    const outside = path.join(await makeTempDir('arkvory-outside-'), path.basename(relative));
    await cp(path.join(dir, relative), outside, { recursive: true });
    await rm(path.join(dir, relative), { recursive: true });
    await symlink(outside, path.join(dir, relative));
    return dir;
  }

  it('fails --verify and a restore (backup_invalid naming the file), the restore rolled back', async () => {
    const linkedBlob = await linkedCopy(blobName(lastBlob));
    const verified = await runCli(['restore', '--verify', linkedBlob], {});
    expect(verified.code, verified.stdout).toBe(1);
    // Progress lines (JSON) may come first; the failure is one line of its own.
    const failure = (stderr: string) =>
      stderr
        .trim()
        .split('\n')
        .filter((l) => !l.startsWith('{'));
    expect(failure(verified.stderr)).toEqual([
      expect.stringMatching(/^arkvory restore --verify: backup_invalid: .* is not a regular file \(a symbolic link\)/),
    ]);

    // A link on a directory of the blob's path is no better.
    const linkedDir = await linkedCopy(path.dirname(blobName(lastBlob)));
    const viaDir = await runCli(['restore', '--verify', linkedDir], {});
    expect(viaDir.code, viaDir.stdout).toBe(1);
    expect(failure(viaDir.stderr)).toEqual([
      expect.stringMatching(/^arkvory restore --verify: backup_invalid: .*a symbolic link on its path/),
    ]);

    const db = await createTestDatabase({ migrated: false });
    drops.push(db.drop);
    const dataDir = await makeTempDir();
    const restored = await runCli(['restore', linkedBlob], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir });
    expect(restored.code).toBe(1);
    expect(failure(restored.stderr).join('\n')).toMatch(
      /^arkvory restore: backup_invalid: .* is not a regular file \(a symbolic link\).*rolled back/,
    );
    expect(existsSync(path.join(dataDir, 'storage-id'))).toBe(false);
    expect(
      (await readdir(path.join(dataDir, 'blobs'), { recursive: true, withFileTypes: true })).filter((e) => e.isFile()),
    ).toEqual([]);
  }, 120_000);
});
