/** Offline scrub and gc under the maintenance barrier, with a real writer process and real files. */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { barrierHolderNames, tryLockExclusive, tryLockShared } from '../../policy/lease/barriers.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway } from '../../test/support/gateway.ts';
import { ALL_STORE_KINDS, startStoreBacking } from '../../test/support/store-kinds.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { BACKUP_APPLICATION_NAME } from './maintenance-barrier.ts';
import { PRINCIPAL_LOCK_CLASS } from '../../storage-adapter/multipart/sessions.ts';

const blobPath = (hex: string) => `blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`;

// The same scrub and gc on the directory store, over HTTP on the static-HTTP store (nginx), and on
// the S3 store on each real S3 server (listing with ListObjectsV2).
describe.each(ALL_STORE_KINDS)('offline maintenance (%s store)', (kind) => {
  const db = useTestDatabase();
  it('refuses while a gateway runs; then scrub quarantines a corrupted blob and gc removes only orphans', async () => {
    await createRepository(db.pool, 'm');
    const { key } = await createServiceAccount(db.pool, { grants: { m: 'write' } });
    const backing = await startStoreBacking(kind);
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ...backing.env } });
    const good = randomContent(100_000);
    const victim = randomContent(50_000);
    for (const [id, body] of [
      ['good.bin', good],
      ['victim.bin', victim],
    ] as const) {
      expect(
        (
          await request(`${gw.url}/api/v1/repositories/m/artifacts/${id}`, {
            method: 'PUT',
            headers: bearer(key),
            body,
          })
        ).status,
      ).toBe(201);
    }
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir, ...backing.env };
    for (const cmd of [['scrub'], ['gc']]) {
      const refused = await runCli(cmd, env);
      expect(refused.code, cmd.join(' ')).toBe(1);
      expect(refused.stderr).toContain('refused: a gateway or worker is running');
    }
    expect(await gw.stop('SIGTERM')).toBe(0);

    // Damage on disk: one blob's bytes change; an unreferenced blob and a stale temp file appear.
    const store = backing.probe(gw.dataDir);
    const exists = async (name: string) => (await store.read(name)) !== undefined;
    await store.write(blobPath(sha256(victim)), randomContent(50_000));
    const orphan = randomContent(1234);
    const orphanHex = createHash('sha256').update(orphan).digest('hex');
    await store.write(blobPath(orphanHex), orphan);
    await store.write('tmp/left-over.upload', 'partial');

    const scrub = await runCli(['scrub'], env);
    expect(scrub.code, scrub.stderr).toBe(1);
    const scrubReport = JSON.parse(scrub.stdout) as {
      checked: number;
      corrupt: Array<{ blob: string; quarantinedAs: string }>;
    };
    expect(scrubReport.checked).toBe(3);
    expect(scrubReport.corrupt.map((c) => c.blob)).toEqual([sha256(victim)]);
    // Reported once, as corrupt (not also as missing).
    expect(JSON.parse(scrub.stdout).missing).toEqual([]);
    expect(await exists(scrubReport.corrupt[0]!.quarantinedAs)).toBe(true);
    expect(await exists(blobPath(sha256(victim)))).toBe(false);

    const dry = JSON.parse((await runCli(['gc', '--dry-run'], env)).stdout) as {
      orphanBlobs: string[];
      staleTmp: string[];
      keptBlobs: number;
    };
    expect(dry).toMatchObject({ orphanBlobs: [orphanHex], staleTmp: ['left-over.upload'], keptBlobs: 1 });
    expect(await exists(blobPath(orphanHex))).toBe(true);
    const gc = await runCli(['gc'], env);
    expect(gc.code, gc.stderr).toBe(0);
    expect(await exists(blobPath(orphanHex))).toBe(false);
    expect(await exists('tmp/left-over.upload')).toBe(false);
    expect(await exists(blobPath(sha256(good)))).toBe(true);
    // victim.bin's row still names the quarantined blob: every later scrub says so until the blob
    // is put back or the artifact deleted, never "clean" while a catalog row names nothing.
    // With its audit entry refused: damage found still exits 1 (it outweighs the entry, said too) ...
    await db.pool.query(`CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$`);
    await db.pool.query(`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON arkvory_audit_events
      FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()`);
    onTestFinished(async () => {
      await db.pool.query('DROP TRIGGER IF EXISTS test_refuse_audit ON arkvory_audit_events');
      await db.pool.query('DROP FUNCTION IF EXISTS test_refuse_audit()');
    });
    const again = await runCli(['scrub'], env);
    expect(again.code, again.stderr).toBe(1);
    expect(JSON.parse(again.stdout)).toMatchObject({ checked: 1, corrupt: [], missing: [sha256(victim)] });
    expect(again.stderr).toMatch(/^arkvory: audit_not_recorded: maintenance\.scrub was done/m);
    await db.pool.query('DELETE FROM arkvory_artifacts WHERE sha256 = $1', [sha256(victim)]);
    // ... and a clean one exits 3 (0 once recorded), as every command whose work was done but not recorded.
    const clean = await runCli(['scrub'], env);
    expect(clean.code, clean.stderr).toBe(3);
    expect(JSON.parse(clean.stdout)).toMatchObject({ checked: 1, corrupt: [], missing: [] });
  }, 120_000);

  it('the same bytes uploaded again under the name of a blob scrub quarantined put the blob back', async () => {
    // A database of its own: the shared one is bound to the store of the test above.
    const own = await createTestDatabase();
    onTestFinished(() => own.drop());
    await createRepository(own.pool, 'r');
    const { key } = await createServiceAccount(own.pool, { grants: { r: 'write' } });
    const backing = await startStoreBacking(kind);
    const env = { ARKVORY_DATABASE_URL: own.url, ...backing.env };
    const body = randomContent(300_000);
    const target = '/api/v1/repositories/r/artifacts/lost.bin';
    const put = (url: string) => request(`${url}${target}`, { method: 'PUT', headers: bearer(key), body });
    let gw = await startGateway({ env });
    expect((await put(gw.url)).status).toBe(201);
    expect(await gw.stop('SIGTERM')).toBe(0);
    const store = backing.probe(gw.dataDir);
    await store.write(blobPath(sha256(body)), randomContent(300_000));
    const scrub = await runCli(['scrub'], { ...env, ARKVORY_DATA_DIR: gw.dataDir });
    expect(scrub.code, scrub.stderr).toBe(1);
    expect(await store.read(blobPath(sha256(body)))).toBeUndefined();

    gw = await startGateway({ env, dataDir: gw.dataDir });
    try {
      // The row still names the blob: the same bytes are the same artifact, and readable again.
      const again = await put(gw.url);
      expect(again.status, again.body.toString()).toBe(200);
      const back = await request(`${gw.url}${target}/content`, { headers: bearer(key) });
      expect(back.status, back.body.toString()).toBe(200);
      expect(sha256(back.body)).toBe(sha256(body));
    } finally {
      await gw.stop('SIGTERM');
    }
  }, 120_000);

  it('the same bytes uploaded again under their name put the verified bytes in place of a damaged blob, answered 200', async () => {
    const own = await createTestDatabase();
    onTestFinished(() => own.drop());
    await createRepository(own.pool, 'r');
    const { key } = await createServiceAccount(own.pool, { grants: { r: 'write' } });
    const backing = await startStoreBacking(kind);
    const body = randomContent(300_000);
    const target = '/api/v1/repositories/r/artifacts/rotted.bin';
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: own.url, ...backing.env } });
    try {
      const put = () => request(`${gw.url}${target}`, { method: 'PUT', headers: bearer(key), body });
      const created = await put();
      expect(created.status, created.body.toString()).toBe(201);
      const store = backing.probe(gw.dataDir);
      for (const [how, damaged] of [
        ['same size, other bytes', randomContent(body.length)],
        ['cut short', body.subarray(0, 100_000)],
      ] as const) {
        // Damaged on the storage host while the gateway runs: no scrub has looked at it yet.
        await store.write(blobPath(sha256(body)), damaged);
        const again = await put();
        expect([how, again.status], again.body.toString()).toEqual([how, 200]);
        expect(JSON.parse(again.body.toString())).toEqual(JSON.parse(created.body.toString()));
        const back = await request(`${gw.url}${target}/content`, { headers: bearer(key) });
        expect([how, back.status], back.body.toString()).toEqual([how, 200]);
        expect(sha256(back.body), how).toBe(sha256(body));
        expect(sha256((await store.read(blobPath(sha256(body))))!), how).toBe(sha256(body));
      }
    } finally {
      await gw.stop('SIGTERM');
    }
  }, 120_000);
});

describe('offline maintenance on the embedded default (no ARKVORY_DATABASE_URL)', () => {
  it('gc and scrub start the embedded database themselves once the gateway is stopped, and stop it again', async () => {
    const gw = await startGateway({ timeoutMs: 90_000 });
    const env = { ARKVORY_DATA_DIR: gw.dataDir };
    const refused = await runCli(['gc', '--dry-run'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('a gateway or worker');
    expect(await gw.stop('SIGTERM', 20_000)).toBe(0);

    // An orphan (no catalog row): gc --dry-run lists it, proving it read this data dir's database.
    const orphan = randomContent(1000);
    const orphanHex = sha256(orphan);
    await mkdir(path.dirname(path.join(gw.dataDir, blobPath(orphanHex))), { recursive: true });
    await writeFile(path.join(gw.dataDir, blobPath(orphanHex)), orphan);
    const gc = await runCli(['gc', '--dry-run'], env);
    expect(gc.code, gc.stderr).toBe(0);
    expect(JSON.parse(gc.stdout).orphanBlobs).toEqual([orphanHex]);
    const scrub = await runCli(['scrub'], env);
    expect(scrub.code, scrub.stderr).toBe(0);
    expect(JSON.parse(scrub.stdout).corrupt).toEqual([]);

    // The embedded PostgreSQL they started is stopped: a gateway takes the data dir again.
    const again = await startGateway({ dataDir: gw.dataDir, timeoutMs: 90_000 });
    expect((await request(`${again.url}/health/status`)).status).toBe(200);
    expect(await again.stop('SIGTERM', 20_000)).toBe(0);
  });
});

describe('offline maintenance refused by a backup', () => {
  const db = useTestDatabase();
  it('gc and scrub refuse at once, naming the backup that holds the barrier (not a gateway)', async () => {
    // A session as `arkvory backup` opens it, holding the barrier shared as a backup does while it copies.
    const backup = new pg.Client({ connectionString: db.url, application_name: BACKUP_APPLICATION_NAME });
    await backup.connect();
    try {
      expect(await tryLockShared(backup, 'maintenance')).toBe(true);
      for (const cmd of [['scrub'], ['gc', '--dry-run']]) {
        const refused = await runCli(cmd, { ARKVORY_DATABASE_URL: db.url });
        expect({ code: refused.code, stderr: refused.stderr }).toEqual({
          code: 1,
          stderr: `arkvory ${cmd[0]}: refused: a backup (arkvory backup) is running on this database (holding the maintenance barrier); run it again when the backup is done\n`,
        });
      }
    } finally {
      await backup.end();
    }
  });
});

describe('gc beside a writer whose lease connection died', () => {
  const db = useTestDatabase();
  let repo = 0;

  /**
   * A writer whose upload of a new blob is held, its blob linked into blobs/ already, at the insert
   * into `table` (a row that statement conflicts with, inserted by `blocker` and not committed);
   * then its lease connection is ended (as after a password rotation): the writer is fenced, and
   * the barrier it held on that connection is free.
   */
  async function fencedMidPublish(
    blocker: pg.PoolClient,
    table: 'arkvory_artifacts' | 'arkvory_blob_slices',
    how: 'row' | 'table' = 'row',
  ) {
    const name = `r${++repo}`;
    await createRepository(db.pool, name);
    const { key } = await createServiceAccount(db.pool, { grants: { [name]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const body = randomContent(64_000);
    const hex = sha256(body);
    await blocker.query('BEGIN');
    // The table itself: the insert waits before its statement runs (gc only reads that table).
    if (how === 'table') await blocker.query(`LOCK TABLE ${table} IN SHARE MODE`);
    else if (table === 'arkvory_artifacts')
      await blocker.query(
        `INSERT INTO arkvory_artifacts (repository, kind, name, version, asset, sha256, size_bytes, content_type)
         VALUES ($1, 'artifact', 'held.bin', '', '', $2, 1, 'application/octet-stream')`,
        [name, '0'.repeat(64)],
      );
    else
      await blocker.query(
        'INSERT INTO arkvory_blob_slices (sha256, size_bytes, slice_bytes, digests) VALUES ($1, 1, 1, $2)',
        [hex, Buffer.alloc(32)],
      );
    const put = request(`${gw.url}/api/v1/repositories/${name}/artifacts/held.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body,
    });
    const waiting = async () =>
      (
        await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
          [`%INSERT INTO ${table}%`],
        )
      ).rows[0]!.n > 0;
    await waitUntil(waiting, { what: `the upload's insert into ${table} to wait`, timeoutMs: 30_000, intervalMs: 25 });
    expect(existsSync(path.join(gw.dataDir, blobPath(hex)))).toBe(true);
    await endLease();
    return { gw, name, hex, put };
  }

  /** Ends the writer's lease connection (as after a password rotation): fenced, it holds the barrier no more. */
  async function endLease(): Promise<void> {
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'arkvory-api-lease'`,
    );
    await waitUntil(async () => !(await barrierHolderNames(db.pool, 'maintenance')).includes('arkvory-api-lease'), {
      what: 'the lease session to end',
      timeoutMs: 10_000,
      intervalMs: 25,
    });
  }

  /** Catalog rows whose blob is not in the directory store. */
  async function rowsWithoutBlob(dataDir: string): Promise<string[]> {
    const { rows } = await db.pool.query<{ sha256: string }>('SELECT DISTINCT sha256 FROM arkvory_artifacts');
    return rows.map((r) => r.sha256).filter((s) => !existsSync(path.join(dataDir, blobPath(s))));
  }

  /**
   * `work` beside a fenced writer held mid-publish (fencedMidPublish) by a connection of the test's,
   * which `release()` lets go (its transaction rolled back); released and returned to the pool after.
   */
  async function besideFencedPublish(
    table: 'arkvory_artifacts' | 'arkvory_blob_slices',
    how: 'row' | 'table',
    work: (held: Awaited<ReturnType<typeof fencedMidPublish>> & { release(): Promise<unknown> }) => Promise<void>,
  ): Promise<void> {
    const blocker = await db.pool.connect();
    try {
      await work({ ...(await fencedMidPublish(blocker, table, how)), release: () => blocker.query('ROLLBACK') });
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
    }
  }

  /** The held upload was refused as offline maintenance's (503 `unavailable`) and left no row. */
  async function expectRefusedUnpublished(put: ReturnType<typeof request>, repository: string): Promise<void> {
    const answered = await put;
    expect({ status: answered.status, code: JSON.parse(answered.body.toString()).code }).toEqual({
      status: 503,
      code: 'unavailable',
    });
    const row = await db.pool.query('SELECT 1 FROM arkvory_artifacts WHERE repository = $1', [repository]);
    expect(row.rowCount).toBe(0);
  }

  it('gc refuses while the fenced writer is inserting the row of an upload; the upload completes whole', async () => {
    await besideFencedPublish('arkvory_artifacts', 'row', async ({ gw, hex, put, release }) => {
      const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir };
      const gc = await runCli(['gc'], env);
      expect({ code: gc.code, refused: gc.stderr.includes('refused: a gateway or worker is running') }).toEqual({
        code: 1,
        refused: true,
      });
      await release();
      expect((await put).status).toBe(201);
      expect(existsSync(path.join(gw.dataDir, blobPath(hex)))).toBe(true);
      expect(await rowsWithoutBlob(gw.dataDir)).toEqual([]);
    });
  }, 120_000);

  it('an upload of the fenced writer whose insert comes after a whole gc removed its blob is refused: no row', async () => {
    await besideFencedPublish('arkvory_artifacts', 'table', async ({ gw, name, hex, put, release }) => {
      const gc = await runCli(['gc'], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir });
      expect(gc.code, gc.stderr).toBe(0);
      expect(JSON.parse(gc.stdout).orphanBlobs).toEqual([hex]);
      await release();
      await expectRefusedUnpublished(put, name);
      expect(await rowsWithoutBlob(gw.dataDir)).toEqual([]);
    });
  }, 120_000);

  it('an upload of the fenced writer whose insert comes while gc holds the barrier is refused: no row', async () => {
    // gc's hold on the barrier, as `arkvory gc` takes it.
    const maintenance = new pg.Client({ connectionString: db.url, application_name: 'arkvory-cli' });
    await maintenance.connect();
    try {
      await besideFencedPublish('arkvory_blob_slices', 'row', async ({ name, put, release }) => {
        expect(await tryLockExclusive(maintenance, 'maintenance')).toBe(true);
        await release();
        await expectRefusedUnpublished(put, name);
      });
    } finally {
      await maintenance.end();
    }
  }, 120_000);

  /**
   * A writer receiving a multipart part, its file written and its row held back (a connection of
   * the test's holds the principal's lock, which recording a part takes first); then fenced. `work`
   * runs meanwhile and lets the row go with `release()`; the part's answer is returned.
   */
  async function fencedMidPart(
    work: (held: { dataDir: string; session: string; release(): Promise<unknown> }) => Promise<void>,
  ): Promise<{ status: number; code: unknown; parts: unknown[]; files: string[] }> {
    const name = `r${++repo}`;
    await createRepository(db.pool, name);
    const { key, principalId } = await createServiceAccount(db.pool, { grants: { [name]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const opened = await request(`${gw.url}/api/v1/repositories/${name}/artifacts/parted.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(opened.status, opened.body.toString()).toBe(201);
    const session = JSON.parse(opened.body.toString()).upload as string;
    const sessionDir = path.join(gw.dataDir, 'uploads', session);
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [PRINCIPAL_LOCK_CLASS, principalId]);
      const put = request(`${gw.url}/api/v1/repositories/${name}/uploads/${session}/parts/1`, {
        method: 'PUT',
        headers: bearer(key),
        body: randomContent(64_000),
      });
      await waitUntil(
        async () =>
          (
            await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'`,
            )
          ).rows[0]!.n > 0,
        { what: "the part's record to wait for the principal's lock", timeoutMs: 30_000, intervalMs: 25 },
      );
      expect(readdirSync(sessionDir)).toHaveLength(1);
      await endLease();
      await work({ dataDir: gw.dataDir, session, release: () => blocker.query('ROLLBACK') });
      const answered = await put;
      // From the database: the fenced writer serves nothing more.
      const recorded = await db.pool.query('SELECT part_number FROM arkvory_upload_parts WHERE session_id = $1', [
        session,
      ]);
      return {
        status: answered.status,
        code: JSON.parse(answered.body.toString()).code,
        parts: recorded.rows,
        files: existsSync(sessionDir) ? readdirSync(sessionDir) : [],
      };
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
    }
  }

  it('a part of the fenced writer whose file a whole gc removed before its row is refused: no 200 for a part that is gone', async () => {
    const answer = await fencedMidPart(async ({ dataDir, session, release }) => {
      const gc = await runCli(['gc'], { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: dataDir });
      expect(gc.code, gc.stderr).toBe(0);
      expect(JSON.parse(gc.stdout).staleUploads).toEqual([expect.stringMatching(new RegExp(`^${session}/00001-`))]);
      await release();
    });
    expect(answer).toEqual({ status: 503, code: 'unavailable', parts: [], files: [] });
  }, 120_000);

  it('a part of the fenced writer whose row comes while gc holds the barrier is refused: no row', async () => {
    const maintenance = new pg.Client({ connectionString: db.url, application_name: 'arkvory-cli' });
    await maintenance.connect();
    try {
      const answer = await fencedMidPart(async ({ release }) => {
        expect(await tryLockExclusive(maintenance, 'maintenance')).toBe(true);
        await release();
      });
      // Refused: its file is removed too, as for any part not recorded.
      expect(answer).toEqual({ status: 503, code: 'unavailable', parts: [], files: [] });
    } finally {
      await maintenance.end();
    }
  }, 120_000);
});
