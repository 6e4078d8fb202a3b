/**
 * The completion worker against a real PostgreSQL, with stores whose timing and failures the test
 * sets: a worker that lost its lock connection, and a store failing after the upload was published.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import type pg from 'pg';
import { beforeAll, expect, it, onTestFinished } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { createTestDatabase, endIdleSessions, useTestDatabase } from '../../test/support/database.ts';
import { openPool, waitUntil } from '../../test/harness/index.ts';
import { CompletionWorker, type CompletionWorkerOptions } from './completion-worker.ts';
import { UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import { createCatalog, type Catalog } from '../../storage-adapter/catalog/catalog.ts';
import type { ArtifactStore, PartStore } from '../../storage-adapter/store.ts';

const db = useTestDatabase();

/** A session's state and error beside its job's attempts. */
async function jobOf(id: string): Promise<{ state: string; error: string | null; attempts: number }> {
  return (
    await db.pool.query(
      'SELECT s.state, s.error, j.attempts FROM arkvory_upload_sessions s JOIN arkvory_upload_jobs j ON j.session_id = s.id WHERE s.id = $1',
      [id],
    )
  ).rows[0];
}
beforeAll(async () => {
  await createRepository(db.pool, 'cw');
});

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

function partStore(removeSession: (sessionId: string) => Promise<void> = async () => {}): PartStore {
  return {
    read: async function* () {},
    write: async () => {},
    has: async () => true,
    remove: async () => {},
    removeSession,
  };
}

function sessionsOf(parts: PartStore, pool: pg.Pool = db.pool): UploadSessions {
  return new UploadSessions({
    pool,
    parts,
    ttlSeconds: 3600,
    limits: {
      maxUploadBytes: 1e9,
      maxSessionsPerPrincipal: 10,
      maxPendingBytesPerPrincipal: 1e9,
      maxPartsPerPrincipal: 1e9,
    },
  });
}

/** A session with a queued job of no parts (complete() wants parts; the worker does not). */
async function queuedJob(sessions: UploadSessions, name: string): Promise<string> {
  const s = await sessions.create(
    { repository: 'cw', kind: 'artifact', name, version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  await db.pool.query(`INSERT INTO arkvory_upload_jobs (session_id, parts) VALUES ($1, '[]')`, [s.id]);
  await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'completing' WHERE id = $1`, [s.id]);
  return s.id;
}

/** A staged upload of nothing, committed and discarded without a store. */
const EMPTY_STAGED = () => ({ sha256: EMPTY_SHA256, sizeBytes: 0, commit: async () => {}, discard: async () => {} });

/** Publish checks the blob it inserted a row for is still there: in these stores it always is. */
const holdsEveryBlob = async () => true;

/** A store over `parts` that stages every body as nothing (its bytes read and dropped), plus `extra`. */
function emptyStagingStore(parts: PartStore, extra: Record<string, unknown> = {}): ArtifactStore {
  return {
    parts,
    hasBlob: holdsEveryBlob,
    async stage(body: AsyncIterable<Uint8Array>) {
      for await (const _ of body);
      return EMPTY_STAGED();
    },
    ...extra,
  } as unknown as ArtifactStore;
}

/** Until session `id` is in `state`. */
async function untilSession(id: string, state: string, timeoutMs = 5000): Promise<void> {
  await waitUntil(
    async () =>
      (await db.pool.query('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [id])).rows[0].state === state,
    { timeoutMs, what: `session ${id} ${state}` },
  );
}

/** A worker over the test's database (or `options`' own), polling every 50 ms, retrying after 10 ms (then 20…), logging nothing. */
function workerOf(
  store: ArtifactStore,
  sessions: UploadSessions,
  options: Partial<CompletionWorkerOptions> = {},
): CompletionWorker {
  return new CompletionWorker({
    pool: db.pool,
    databaseUrl: db.url,
    store,
    catalog: createCatalog(options.pool ?? db.pool),
    sessions,
    log: pino({ level: 'silent' }),
    holdMaintenanceBarrier: false,
    pollMs: 50,
    retryDelayMs: 10,
    ...options,
  });
}

it("keeps its lock through the database's idle_session_timeout: no lock lost, and a job queued after the idle time runs", async () => {
  const own = await createTestDatabase();
  onTestFinished(() => own.drop());
  await createRepository(own.pool, 'cw');
  await endIdleSessions(own);
  // A pool of its own made after the setting, whose idle clients the server ends (the pool replaces them).
  const pool = openPool(own.url, 4);
  onTestFinished(() => pool.end());
  const parts = partStore();
  const sessions = sessionsOf(parts, pool);
  const logs: string[] = [];
  const worker = workerOf(emptyStagingStore(parts), sessions, {
    pool,
    databaseUrl: own.url,
    catalog: createCatalog(pool),
    log: pino({ level: 'info' }, { write: (s: string) => logs.push(s) }),
    standbyRetryMs: 200,
  });
  await worker.start();
  onTestFinished(() => worker.stop(1000));
  expect(worker.isActive).toBe(true);
  await sleep(700);
  expect(worker.isActive).toBe(true);
  expect(logs.filter((l) => l.includes('worker.lock_lost'))).toEqual([]);
  const s = await sessions.create(
    { repository: 'cw', kind: 'artifact', name: 'idle-kept', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  await pool.query(`INSERT INTO arkvory_upload_jobs (session_id, parts) VALUES ($1, '[]')`, [s.id]);
  await pool.query(`UPDATE arkvory_upload_sessions SET state = 'completing' WHERE id = $1`, [s.id]);
  await waitUntil(
    async () =>
      (await pool.query('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [s.id])).rows[0].state === 'done',
    { timeoutMs: 5000, what: 'the job queued after the idle time to finish' },
  );
  expect(logs.filter((l) => l.includes('worker.lock_lost'))).toEqual([]);
});

it('a worker whose lock connection dies stops, and the job runs once, finishing done', async () => {
  let stages = 0;
  let concurrent = 0;
  let maxConcurrent = 0;
  const parts = partStore();
  // Staging takes 3 s and does not heed the abort: the worst case for a worker that lost its lock.
  const store = {
    parts,
    hasBlob: holdsEveryBlob,
    async stage(body: AsyncIterable<Uint8Array>) {
      stages++;
      concurrent++;
      maxConcurrent = Math.max(maxConcurrent, concurrent);
      for await (const _ of body);
      await sleep(3000);
      concurrent--;
      return EMPTY_STAGED();
    },
  } as unknown as ArtifactStore;
  const catalog = createCatalog(db.pool);
  const sessions = sessionsOf(parts);
  const logs: string[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => logs.push(s) });
  const worker = () =>
    new CompletionWorker({
      pool: db.pool,
      databaseUrl: db.url,
      store,
      catalog,
      sessions,
      log,
      holdMaintenanceBarrier: false,
      standbyRetryMs: 200,
      pollMs: 50,
      expirySweepMs: 300,
    });
  const w1 = worker();
  await w1.start();
  expect(w1.isActive).toBe(true);
  const id = await queuedJob(sessions, 'lock-lost');
  await waitUntil(() => stages === 1, { timeoutMs: 5000 });
  const w2 = worker();
  await w2.start();
  expect(w2.isActive).toBe(false);
  try {
    // w1's lock connection dies (a network blip, a restarted pgbouncer, an administrator).
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = 3 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    await waitUntil(() => w2.isActive, { timeoutMs: 5000 });
    expect(w1.isActive).toBe(false);
    await untilSession(id, 'done', 10_000);
    await sleep(1000); // time for a second run, were there one
    expect(maxConcurrent).toBe(1);
    expect(stages).toBe(1);
    const job = (await db.pool.query('SELECT state, attempts FROM arkvory_upload_jobs WHERE session_id = $1', [id]))
      .rows[0];
    expect(job).toEqual({ state: 'done', attempts: 1 });
    expect(logs.some((l) => l.includes('worker.lock_lost'))).toBe(true);
  } finally {
    await w1.stop(100);
    await w2.stop(100);
  }
});

it('a store failure while removing the parts of a published upload leaves it done', async () => {
  const parts = partStore(async () => {
    throw new StorageError('upstream_unreachable', 'The artifact store could not be reached (DELETE …: ECONNRESET).');
  });
  const store = emptyStagingStore(parts);
  const catalog: Catalog = createCatalog(db.pool);
  const sessions = sessionsOf(parts);
  const w = workerOf(store, sessions, { catalog });
  const id = await queuedJob(sessions, 'parts-left');
  await w.start();
  try {
    await waitUntil(
      async () =>
        (await db.pool.query(`SELECT state FROM arkvory_upload_jobs WHERE session_id = $1`, [id])).rows[0].state !==
        'queued',
      { timeoutMs: 5000 },
    );
    await sleep(500);
  } finally {
    await w.stop(100);
  }
  const row = (
    await db.pool.query('SELECT state, error, result_sha256 FROM arkvory_upload_sessions WHERE id = $1', [id])
  ).rows[0];
  expect(row).toEqual({ state: 'done', error: null, result_sha256: EMPTY_SHA256 });
  expect(
    (await catalog.get({ repository: 'cw', kind: 'artifact', name: 'parts-left', version: '', asset: '' }))?.sha256,
  ).toBe(EMPTY_SHA256);
});

it('a principal disabled while its completion is assembled publishes nothing: asked again once the bytes are staged', async () => {
  const who = await createServiceAccount(db.pool, { grants: { cw: 'write' } });
  const removed: string[] = [];
  const parts = partStore(async (session) => {
    removed.push(session);
  });
  const sessions = sessionsOf(parts);
  let discarded = 0;
  // Disables the principal while the body is being staged, as a revocation during a long assembly.
  const store = emptyStagingStore(parts, {
    async stage(body: AsyncIterable<Uint8Array>) {
      for await (const _ of body);
      await new AdminStore(db.pool).setPrincipalDisabled(who.principalId, true);
      return { ...EMPTY_STAGED(), discard: async () => void discarded++ };
    },
  });
  const s = await sessions.create(
    { repository: 'cw', kind: 'artifact', name: 'disabled-mid-assembly', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: who.principalId },
  );
  await db.pool.query(`INSERT INTO arkvory_upload_jobs (session_id, parts) VALUES ($1, '[]')`, [s.id]);
  await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'completing' WHERE id = $1`, [s.id]);
  const logs: string[] = [];
  const w = workerOf(store, sessions, { log: pino({ level: 'info' }, { write: (l: string) => logs.push(l) }) });
  await w.start();
  onTestFinished(() => w.stop(100));
  await untilSession(s.id, 'failed');
  expect((await jobOf(s.id)).error).toMatch(/^unauthorized: .*nothing was published/);
  expect(
    await createCatalog(db.pool).get({
      repository: 'cw',
      kind: 'artifact',
      name: 'disabled-mid-assembly',
      version: '',
      asset: '',
    }),
  ).toBeUndefined();
  expect(discarded).toBe(1);
  await waitUntil(() => removed.includes(s.id), { what: 'its parts removed', timeoutMs: 5000 });
  const failed = logs.map((l) => JSON.parse(l)).filter((l) => l.event === 'upload.failed');
  expect(failed.map((l) => l.code)).toEqual(['unauthorized']);
});

it("a store failure that passes is waited out past the attempts, its parts kept, told in the catalogue's words; then it publishes", async () => {
  let removed = 0;
  const parts = partStore(async () => {
    removed++;
  });
  const quoted = 'The S3 server answered PUT arkvory/tmp/x with 500 InternalError: connect ECONNREFUSED 10.0.0.30:8333';
  let down = true;
  let stages = 0;
  const store = emptyStagingStore(parts, {
    async stage(body: AsyncIterable<Uint8Array>) {
      for await (const _ of body);
      stages++;
      if (down) throw new StorageError('upstream_timeout', quoted);
      return EMPTY_STAGED();
    },
  });
  const sessions = sessionsOf(parts);
  // Two attempts for a failure of ours: a store failure goes on past them while its session is unexpired.
  const w = workerOf(store, sessions, { maxAttempts: 2 });
  const id = await queuedJob(sessions, 'store-waits');
  const row = () => jobOf(id);
  await w.start();
  try {
    await waitUntil(async () => stages >= 4 || (await row()).state !== 'completing', { timeoutMs: 5000 });
    const waiting = await row();
    // Before, the first timeout failed the upload for good and removed its parts.
    expect(waiting.state).toBe('completing');
    expect(waiting.error).toBe(`upstream_timeout: ${new StorageError('upstream_timeout').message}`);
    expect(waiting.error).not.toContain('10.0.0.30');
    expect(removed).toBe(0);
    down = false;
    await untilSession(id, 'done');
  } finally {
    await w.stop(100);
  }
  expect(await row()).toMatchObject({ state: 'done', error: null });
  expect(removed).toBe(1);
});

it('a store failure still there once its session has expired is final: failed in its words, the parts removed', async () => {
  let removed = 0;
  const parts = partStore(async () => {
    removed++;
  });
  const store = emptyStagingStore(parts, {
    async stage(body: AsyncIterable<Uint8Array>) {
      for await (const _ of body);
      throw new StorageError('storage_full', 'ENOSPC: no space left on device, write');
    },
  });
  const sessions = sessionsOf(parts);
  const w = workerOf(store, sessions, { maxAttempts: 2 });
  const id = await queuedJob(sessions, 'store-waits-expired');
  await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, [
    id,
  ]);
  await w.start();
  try {
    await untilSession(id, 'failed');
  } finally {
    await w.stop(100);
  }
  const r = await db.pool.query(
    'SELECT s.error, j.attempts FROM arkvory_upload_sessions s JOIN arkvory_upload_jobs j ON j.session_id = s.id WHERE s.id = $1',
    [id],
  );
  // Its attempts (those a failure of ours gets), then no more.
  expect(r.rows[0]).toEqual({ error: `storage_full: ${new StorageError('storage_full').message}`, attempts: 2 });
  expect(removed).toBe(1);
});

it('a failure of ours (a staged temporary gone, raw or as unavailable) is retried, and its detail never reaches session.error', async () => {
  const parts = partStore();
  let commits = 0;
  let failFirst = 0;
  const raw = () =>
    Object.assign(new Error("ENOENT: no such file or directory, link '/srv/arkvory/tmp/worker/x.upload'"), {
      code: 'ENOENT',
    });
  // As a store's staged blob reports its temporary gone (storage-adapter/streaming/staged-blob.ts).
  const gone = () => new StorageError('unavailable', 'The staged bytes were removed before they were published.');
  let lost: () => Error = raw;
  const store = {
    parts,
    hasBlob: holdsEveryBlob,
    async stage(body: AsyncIterable<Uint8Array>) {
      for await (const _ of body);
      return {
        sha256: EMPTY_SHA256,
        sizeBytes: 0,
        commit: async () => {
          commits++;
          if (failFirst-- > 0) throw lost();
        },
        discard: async () => {},
      };
    },
  } as unknown as ArtifactStore;
  const catalog = createCatalog(db.pool);
  const sessions = sessionsOf(parts);
  const w = workerOf(store, sessions, { catalog });
  const finished = jobOf;
  await w.start();
  try {
    failFirst = 1;
    const retried = await queuedJob(sessions, 'lost-once');
    await waitUntil(async () => (await finished(retried)).state === 'done', { timeoutMs: 5000 });
    expect(await finished(retried)).toEqual({ state: 'done', error: null, attempts: 2 });
    expect(commits).toBe(2);

    lost = gone;
    failFirst = 1;
    const removed = await queuedJob(sessions, 'removed-once');
    await waitUntil(async () => (await finished(removed)).state !== 'completing', { timeoutMs: 5000 });
    expect(await finished(removed)).toEqual({ state: 'done', error: null, attempts: 2 });
    lost = raw;

    failFirst = 100;
    const failing = await queuedJob(sessions, 'lost-always');
    await waitUntil(async () => (await finished(failing)).state === 'failed', { timeoutMs: 5000 });
    const row = await finished(failing);
    expect(row.error).toBe('gave up after 5 attempts');
    expect(row.error).not.toMatch(/ENOENT|\//);
  } finally {
    await w.stop(100);
  }
});

/** A TCP relay to PostgreSQL that can drop its client sides while keeping the server sides open. */
async function halfOpenRelay(url: string) {
  const target = new URL(url);
  const pairs: Array<{ client: net.Socket; server: net.Socket }> = [];
  const relay = net.createServer((client) => {
    const server = net.connect(Number(target.port), target.hostname);
    client.pipe(server);
    server.pipe(client);
    client.on('error', () => {});
    server.on('error', () => {});
    pairs.push({ client, server });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  const { port } = relay.address() as net.AddressInfo;
  return {
    url: Object.assign(new URL(url), { hostname: '127.0.0.1', port: String(port) }).toString(),
    /** The client sees its connections closed; PostgreSQL sees nothing (a peer gone without a FIN). */
    dropClientSides() {
      for (const { client, server } of pairs.splice(0)) {
        server.unpipe(client);
        client.unpipe(server);
        client.destroy();
      }
    },
    async close() {
      for (const { client, server } of pairs.splice(0)) {
        client.destroy();
        server.destroy();
      }
      await new Promise((resolve) => relay.close(resolve));
    },
  };
}

it('a worker whose lock connection is cut ends the backend PostgreSQL kept, takes the lock again and works', async () => {
  const relay = await halfOpenRelay(db.url);
  const parts = partStore();
  let cleared = 0;
  const store = emptyStagingStore(parts, {
    // What an earlier worker left staged goes each time this one takes the lock.
    async clearStaging() {
      cleared++;
    },
  });
  const sessions = sessionsOf(parts);
  const w = workerOf(store, sessions, { databaseUrl: relay.url, standbyRetryMs: 100 });
  await w.start();
  try {
    expect(cleared).toBe(1);
    relay.dropClientSides();
    await waitUntil(() => !w.isActive, { timeoutMs: 5000 });
    await waitUntil(() => w.isActive, { timeoutMs: 5000, what: 'the worker to take the lock again' });
    expect(cleared).toBe(2);
    const id = await queuedJob(sessions, 'after-cut');
    await untilSession(id, 'done');
  } finally {
    await w.stop(100);
    await relay.close();
  }
});

it('works with a pool of one connection (the claim lock is held elsewhere)', async () => {
  const pool = openPool(db.url, 1);
  const parts = partStore();
  const store = emptyStagingStore(parts);
  const sessions = sessionsOf(parts, pool);
  const w = workerOf(store, sessions, { pool, standbyRetryMs: 100 });
  const id = await queuedJob(sessions, 'pool-of-one');
  await w.start();
  try {
    await untilSession(id, 'done');
  } finally {
    await w.stop(100);
    await pool.end();
  }
});

it('a job past a thousand attempts (a store failure waited out for days) waits its capped time, and other jobs still run', async () => {
  const parts = partStore();
  const sessions = sessionsOf(parts);
  // Its session lives long enough (up to 30 days): at the capped wait of 5 minutes, ~3.5 days of attempts.
  const waiting = await queuedJob(sessions, 'waits-for-days');
  await db.pool.query(
    `UPDATE arkvory_upload_jobs SET attempts = 1100, error = 'storage_full: …', updated_at = now() WHERE session_id = $1`,
    [waiting],
  );
  const other = await queuedJob(sessions, 'behind-a-long-wait');
  const w = workerOf(emptyStagingStore(parts), sessions);
  await w.start();
  try {
    // Before, the wait's SQL overflowed (2^1099) and every claim failed: no job of anyone ran.
    await untilSession(other, 'done', 3000);
  } finally {
    await w.stop(100);
  }
  expect(await jobOf(waiting)).toMatchObject({ state: 'completing', attempts: 1100 });
});
