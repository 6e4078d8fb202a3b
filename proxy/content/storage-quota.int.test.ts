/**
 * Storage quotas over HTTP on a real writer: 20 uploads racing for the last 100 MiB of a
 * repository's quota (those that fit publish; the rest get 507 `quota_exceeded` before 100 Continue,
 * so not one of their body bytes is sent or stored, checked on disk), on one process and on a writer
 * of three worker processes, and a chunked upload cut where it crosses the quota, with nothing
 * published and its reservation given back.
 */
import { createHash } from 'node:crypto';
import { readdir, stat } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { formatContentDigest } from './digest.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { listKeys } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { waitForWorkers, type WorkersStatus } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
const MiB = 1024 * 1024;

interface Answer {
  status: number;
  body: Record<string, unknown>;
  /** Whether the gateway asked for the body (100 Continue). */
  continued: boolean;
}

/**
 * A PUT that sends its body only after 100 Continue (`Expect: 100-continue`), or at once in chunks
 * (no Content-Length) when `chunked`.
 */
function put(
  url: string,
  key: string,
  body: Buffer,
  chunked = false,
  agent?: http.Agent,
  extraHeaders: Record<string, string> = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let continued = false;
    const headers: Record<string, string> = {
      ...bearer(key),
      'content-type': 'application/octet-stream',
      ...extraHeaders,
    };
    if (chunked) headers['transfer-encoding'] = 'chunked';
    else Object.assign(headers, { 'content-length': String(body.length), expect: '100-continue' });
    const req = http.request(url, { method: 'PUT', headers, agent: agent ?? false });
    req.on('continue', () => {
      continued = true;
      req.end(body);
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString() || '{}'), continued }),
      );
    });
    // A refused chunked upload may see its connection closed while it still sends: the answer came first.
    req.on('error', reject);
    if (chunked) {
      for (let at = 0; at < body.length; at += 256 * 1024) req.write(body.subarray(at, at + 256 * 1024));
      req.end();
    } else req.flushHeaders();
  });
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

/** 10 MiB whose first bytes make it distinct (each upload its own blob). */
function payload(seed: number, bytes = 10 * MiB): Buffer {
  const buffer = Buffer.alloc(bytes, 7);
  buffer.writeUInt32BE(seed, 0);
  return buffer;
}

/** The index of the worker process holding `agent`'s one connection (its `/health/status`). */
function workerOf(url: string, agent: http.Agent): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(`${url}/health/status`, { agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve((JSON.parse(Buffer.concat(chunks).toString()) as WorkersStatus).workerIndex));
      })
      .on('error', reject);
  });
}

/** A repository quota of 1,000 bytes on `repository`. */
async function limitRepositoryTo1000(repository: string): Promise<void> {
  await db.pool.query(
    `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, 1000)`,
    [repository],
  );
}

/** Starts a multipart session for `assembled` under the repository URL `base`; its id. */
async function startAssembledSession(base: string, key: string): Promise<string> {
  const started = await fetch(`${base}/artifacts/assembled/uploads`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: '{}',
  });
  return ((await started.json()) as { upload: string }).upload;
}

describe('storage quotas over HTTP (real writer, blobs on disk)', () => {
  it('20 uploads racing for the last 100 MiB: 10 publish, 10 get 507 quota_exceeded before any body byte; a chunked upload is cut and releases its reservation', async () => {
    const repository = 'quota-race';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
    // All 20 admitted at once (the default admits one upload of a principal at a time).
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '20' } });
    const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
    const quotaUrl = `${gw.url}/api/v1/admin/quotas/repositories/${repository}`;
    const quota = async (method = 'GET', body?: unknown) => {
      const res = await fetch(quotaUrl, {
        method,
        headers: { ...bearer(admin.key), ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
    };

    expect((await put(artifact('base'), writer.key, payload(1000, MiB))).status).toBe(201);
    const limit = 101 * MiB;
    expect(await quota('PUT', { limitBytes: limit })).toEqual({
      status: 200,
      body: {
        scope: 'repository',
        subject: repository,
        limitBytes: limit,
        storedBytes: MiB,
        reservedBytes: 0,
        usageBytes: MiB,
        remainingBytes: 100 * MiB,
      },
    });
    // A mistyped repository is refused: it would leave the intended one without a limit.
    const typo = await fetch(`${gw.url}/api/v1/admin/quotas/repositories/quota-racr`, {
      method: 'PUT',
      headers: { ...bearer(admin.key), 'content-type': 'application/json' },
      body: JSON.stringify({ limitBytes: limit }),
    });
    expect(typo.status).toBe(404);
    expect(await typo.json()).toMatchObject({ code: 'not_found', message: 'No repository quota-racr.' });
    expect((await db.pool.query(`SELECT 1 FROM arkvory_storage_quotas WHERE subject = 'quota-racr'`)).rowCount).toBe(0);
    // Nor is it shown as an empty repository, where the typo would go unnoticed.
    const typoShown = await fetch(`${gw.url}/api/v1/admin/quotas/repositories/quota-racr`, {
      headers: bearer(admin.key),
    });
    expect(typoShown.status).toBe(404);
    expect(await typoShown.json()).toMatchObject({ code: 'not_found', message: 'No repository quota-racr.' });

    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => put(artifact(`race-${i}`), writer.key, payload(i))),
    );
    const published = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status !== 201);
    expect(published).toHaveLength(10);
    for (const a of published) expect(a.continued).toBe(true);
    expect(refused).toHaveLength(10);
    for (const a of refused) {
      expect(a.status).toBe(507);
      expect(a.continued).toBe(false); // refused before the body was asked for
      expect(a.body).toEqual({
        code: 'quota_exceeded',
        message: expect.any(String),
        scope: 'repository',
        subject: repository,
        quotaBytes: limit,
        usageBytes: limit,
        remainingBytes: 0,
        requestedBytes: 10 * MiB,
      });
    }
    // On disk: the base blob and the 10 published ones, nothing staged.
    expect(await filesUnder(path.join(gw.dataDir, 'blobs'))).toHaveLength(11);
    expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
    expect((await quota()).body).toMatchObject({ storedBytes: limit, reservedBytes: 0, remainingBytes: 0 });

    // A delete gives its bytes back at once.
    const winner = answers.findIndex((a) => a.status === 201);
    const deleted = await fetch(artifact(`race-${winner}`), { method: 'DELETE', headers: bearer(writer.key) });
    expect(deleted.status).toBe(204);
    expect((await quota()).body).toMatchObject({ storedBytes: 91 * MiB, remainingBytes: 10 * MiB });

    // Chunked, 12 MiB into the 10 MiB left: cut where it crosses the quota; nothing published or kept.
    const cut = await put(artifact('chunked-too-big'), writer.key, payload(77, 12 * MiB), true).catch(
      (err: unknown) => err as Error,
    );
    expect(cut).not.toBeInstanceOf(Error);
    expect(cut).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', quotaBytes: limit, remainingBytes: 10 * MiB },
    });
    expect((await fetch(`${artifact('chunked-too-big')}/content`, { headers: bearer(writer.key) })).status).toBe(404);
    expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
    // The deleted artifact's blob stays until gc; the cut upload added none.
    expect(await filesUnder(path.join(gw.dataDir, 'blobs'))).toHaveLength(11);
    const { rows } = await db.pool.query('SELECT id FROM arkvory_quota_reservations');
    expect(rows).toEqual([]);
    expect((await quota()).body).toMatchObject({ reservedBytes: 0, remainingBytes: 10 * MiB });
    // What fits still goes in, chunked too.
    expect((await put(artifact('chunked-fits'), writer.key, payload(78, 10 * MiB), true)).status).toBe(201);
    expect((await quota()).body).toMatchObject({ storedBytes: limit, remainingBytes: 0 });

    expect((await quota('DELETE')).status).toBe(204);
    // A refusal is the client's state of its quota, not a fault of ours: no line at the error level.
    expect(gw.logs()).toMatch(/"code":"quota_exceeded"/);
    expect(gw.logs()).not.toMatch(/"level":"error"/);
    expect(await gw.stop()).toBe(0);
  });

  it('bytes the repository already holds cost nothing more: into a full quota, the same bytes again are answered unchanged, under another name published; new bytes are still refused', async () => {
    const repository = 'quota-held';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    // Principal quotas: `other` has room for one copy of the bytes, `full` for none.
    const other = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const full = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
    const setQuota = (scope: string, subject: string, bytes: number) =>
      db.pool.query(`INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ($1, $2, $3)`, [
        scope,
        subject,
        bytes,
      ]);
    const bytes = payload(500, MiB);
    const digest = { 'content-digest': formatContentDigest(createHash('sha256').update(bytes).digest('hex')) };
    // Every row's size: the repository's usage counts the one blob once.
    const stored = async () =>
      (
        await db.pool.query<{ n: string; rows: string }>(
          `SELECT coalesce(sum(size_bytes), 0)::text AS n, count(*)::text AS rows FROM arkvory_artifacts WHERE repository = $1`,
          [repository],
        )
      ).rows[0]!;

    await setQuota('repository', repository, MiB);
    expect((await put(artifact('a'), writer.key, bytes)).status).toBe(201);
    await setQuota('principal', other.principalId, MiB);
    await setQuota('principal', full.principalId, MiB - 1);

    // The same name, the same bytes: unchanged (an idempotent retry), declared digest or not, chunked or not.
    for (const [how, chunked, headers] of [
      ['Content-Length', false, {}],
      ['Content-Length and Content-Digest', false, digest],
      ['chunked', true, {}],
      ['chunked with Content-Digest', true, digest],
    ] as const) {
      const again = await put(artifact('a'), writer.key, bytes, chunked, undefined, headers);
      expect({ how, status: again.status, sha256: again.body.sha256 }).toEqual({
        how,
        status: 200,
        sha256: createHash('sha256').update(bytes).digest('hex'),
      });
    }
    // Another principal's retry of the same name is unchanged too, even with no room of its own.
    expect((await put(artifact('a'), full.key, bytes)).status).toBe(200);

    // Another name, the same bytes with their digest declared: published, costing the repository
    // nothing more, decided before the body as every upload is.
    for (const [name, chunked] of [
      ['b', false],
      ['c', true],
    ] as const) {
      const answer = await put(artifact(name), writer.key, bytes, chunked, undefined, digest);
      expect({ name, status: answer.status }).toEqual({ name, status: 201 });
    }
    // Without a declared digest the bytes are unknown until read: refused before the body (chunked,
    // where it crosses the quota), as any upload that does not fit.
    expect(await put(artifact('b2'), writer.key, bytes)).toMatchObject({
      status: 507,
      continued: false,
      body: { code: 'quota_exceeded', scope: 'repository', requestedBytes: MiB },
    });
    expect(await put(artifact('c2'), writer.key, bytes, true)).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', scope: 'repository' },
    });
    // A principal that had not published them is charged them (once), within its own quota...
    expect((await put(artifact('d'), other.key, bytes, false, undefined, digest)).status).toBe(201);
    expect((await put(artifact('e'), other.key, bytes, true, undefined, digest)).status).toBe(201);
    // ...and refused past it, though the repository would take them.
    expect(await put(artifact('f'), full.key, bytes, false, undefined, digest)).toMatchObject({
      status: 507,
      continued: false,
      body: { code: 'quota_exceeded', scope: 'principal', subject: full.principalId, requestedBytes: MiB },
    });
    expect(await stored()).toEqual({ n: String(5 * MiB), rows: '5' });

    // New bytes are still refused: before their body, or chunked where they cross the quota.
    const fresh = payload(501, MiB);
    const freshDigest = { 'content-digest': formatContentDigest(createHash('sha256').update(fresh).digest('hex')) };
    const refusals = [
      await put(artifact('new-1'), writer.key, fresh),
      await put(artifact('new-2'), writer.key, fresh, false, undefined, freshDigest),
      await put(artifact('new-3'), writer.key, fresh, true),
      await put(artifact('new-4'), writer.key, fresh, true, undefined, freshDigest),
      // Under the name of held bytes, more bytes than it holds: cut where they pass its size.
      await put(artifact('a'), writer.key, payload(502, 2 * MiB), true),
    ];
    expect(refusals.map((r) => [r.status, r.body.code, r.body.scope])).toEqual(
      Array.from({ length: 5 }, () => [507, 'quota_exceeded', 'repository']),
    );
    expect(refusals.slice(0, 2).map((r) => r.continued)).toEqual([false, false]);
    // More bytes than the held blob cannot be it, whatever digest they declare: refused before their
    // body (chunked, where they pass its size), not read whole on the strength of the digest.
    const posing = payload(503, 2 * MiB);
    const posed = [
      await put(artifact('posing-1'), writer.key, posing, false, undefined, digest),
      await put(artifact('posing-2'), writer.key, posing, true, undefined, digest),
    ];
    expect(posed.map((r) => [r.status, r.continued, r.body.code, r.body.requestedBytes])).toEqual([
      [507, false, 'quota_exceeded', 2 * MiB],
      [507, false, 'quota_exceeded', expect.any(Number)],
    ]);
    expect(posed[1]!.body.requestedBytes).toBeGreaterThan(MiB);
    expect(posed[1]!.body.requestedBytes).toBeLessThanOrEqual(MiB + 256 * 1024);
    // Under the name of held bytes, other bytes of its size: read (they might have been the same),
    // then the conflict any other bytes under a published name get.
    expect((await put(artifact('a'), writer.key, fresh)).body.code).toBe('conflict');
    expect(await stored()).toEqual({ n: String(5 * MiB), rows: '5' });
    // Nothing of them kept: the held blob only, nothing staged, no reservation left.
    const blobs = (await filesUnder(path.join(gw.dataDir, 'blobs'))).map((f) => path.basename(f));
    expect(blobs).not.toContain(createHash('sha256').update(fresh).digest('hex'));
    expect(blobs).toContain(createHash('sha256').update(bytes).digest('hex'));
    expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });

  it('a retry read on probation whose name is deleted meanwhile is decided by its digest: new bytes to the repository are refused, nothing kept', async () => {
    const repository = 'quota-retry-race';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    // The retry and the upload that takes its room run at once.
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '2' } });
    const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, $2)`,
      [repository, 2 * MiB],
    );
    const held = payload(600, 2 * MiB);
    expect((await put(artifact('a'), writer.key, held)).status).toBe(201); // the quota is full

    // The same bytes again, chunked and without a digest: its first chunk cannot be reserved, so the
    // body is read on probation (the name holds a blob that large). It stops halfway.
    let answer: Answer | Error | undefined;
    const retry = http.request(artifact('a'), {
      method: 'PUT',
      headers: { ...bearer(writer.key), 'transfer-encoding': 'chunked' },
      agent: false,
    });
    retry.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        answer = {
          status: res.statusCode!,
          body: JSON.parse(Buffer.concat(chunks).toString() || '{}'),
          continued: false,
        };
      });
    });
    retry.on('error', (err) => {
      answer ??= err;
    });
    retry.write(held.subarray(0, MiB + 64 * 1024));
    const staged = async () => {
      for (const file of await filesUnder(path.join(gw.dataDir, 'tmp')))
        if (((await stat(file).catch(() => undefined))?.size ?? 0) >= MiB) return true;
      return false;
    };
    await waitUntil(async () => answer !== undefined || (await staged()), {
      what: 'the retry to be staged or answered',
      timeoutMs: 30_000,
    });
    expect(answer).toBeUndefined(); // still reading, not refused

    // Meanwhile its name goes, and new bytes take the room it gave back.
    expect((await fetch(artifact('a'), { method: 'DELETE', headers: bearer(writer.key) })).status).toBe(204);
    expect((await put(artifact('other'), writer.key, payload(601, 2 * MiB))).status).toBe(201);

    // The retry ends: no longer unchanged, its bytes are new to the repository again, and do not fit.
    retry.end(held.subarray(MiB + 64 * 1024));
    await waitUntil(() => answer !== undefined, { what: 'the retry to be answered', timeoutMs: 30_000 });
    expect(answer).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', scope: 'repository', requestedBytes: 2 * MiB, remainingBytes: 0 },
    });
    expect((await fetch(`${artifact('a')}/content`, { headers: bearer(writer.key) })).status).toBe(404);
    expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    const stored = await db.pool.query<{ n: string }>(
      `SELECT sum(size_bytes)::text AS n FROM arkvory_artifacts WHERE repository = $1`,
      [repository],
    );
    expect(stored.rows[0]!.n).toBe(String(2 * MiB));
    expect(await gw.stop()).toBe(0);
  });

  it('the race on a writer of three worker processes: each takes 6-7 of the 20 uploads, and exactly 10 fit', async () => {
    const repository = 'quota-race-workers';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    // 20 uploads of one principal at once, as above.
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '3', ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '20' },
    });
    const agents: http.Agent[] = [];
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 3);
      await db.pool.query(
        `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, $2)`,
        [repository, 100 * MiB],
      );
      // Each reservation's transaction lingers 50 ms after its check: reservations arriving from the
      // three processes overlap, so only the quota's lock keeps a late one from the room an earlier
      // one is about to take (without it, every upload of the race would be granted).
      await db.pool.query(
        `CREATE FUNCTION linger_reservation() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$`,
      );
      await db.pool.query(
        `CREATE TRIGGER linger_reservation BEFORE INSERT ON arkvory_quota_reservations FOR EACH ROW EXECUTE FUNCTION linger_reservation()`,
      );
      // One kept-alive connection per upload, placed on a known worker: 7, 7 and 6 of them.
      const byWorker = new Map<number, http.Agent[]>([
        [0, []],
        [1, []],
        [2, []],
      ]);
      const wanted = [7, 7, 6];
      for (let i = 0; i < 300 && [...byWorker].some(([w, list]) => list.length < wanted[w]!); i++) {
        const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
        agents.push(agent);
        const worker = await workerOf(gw.url, agent);
        const list = byWorker.get(worker)!;
        if (list.length < wanted[worker]!) list.push(agent);
      }
      expect([...byWorker.values()].map((list) => list.length)).toEqual(wanted);
      const placed = [...byWorker].flatMap(([worker, list]) => list.map((agent) => ({ worker, agent })));

      const answers = await Promise.all(
        placed.map(({ agent }, i) =>
          put(
            `${gw.url}/api/v1/repositories/${repository}/artifacts/race-${i}`,
            writer.key,
            payload(100 + i),
            false,
            agent,
          ),
        ),
      );
      expect(answers.filter((a) => a.status === 201)).toHaveLength(10);
      for (const [i, a] of answers.entries()) {
        if (a.status === 201) expect(a.continued, `upload ${i} on worker ${placed[i]!.worker}`).toBe(true);
        else
          expect(a, `upload ${i} on worker ${placed[i]!.worker}`).toMatchObject({
            status: 507,
            continued: false,
            body: { code: 'quota_exceeded', quotaBytes: 100 * MiB, remainingBytes: 0 },
          });
      }
      // On disk (the data directory is this file's, shared by its tests): exactly the published
      // uploads' blobs among the race's, nothing staged.
      const blobs = new Set((await filesUnder(path.join(gw.dataDir, 'blobs'))).map((f) => path.basename(f)));
      const onDisk = answers.map((_, i) =>
        blobs.has(
          createHash('sha256')
            .update(payload(100 + i))
            .digest('hex'),
        ),
      );
      expect(onDisk).toEqual(answers.map((a) => a.status === 201));
      expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
      expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
      const stored = await db.pool.query<{ n: string }>(
        `SELECT sum(size_bytes)::text AS n FROM arkvory_artifacts WHERE repository = $1`,
        [repository],
      );
      expect(stored.rows[0]!.n).toBe(String(100 * MiB));
    } finally {
      for (const agent of agents) agent.destroy();
      await db.pool.query('DROP TRIGGER IF EXISTS linger_reservation ON arkvory_quota_reservations');
      await db.pool.query('DROP FUNCTION IF EXISTS linger_reservation()');
    }
    expect(await gw.stop()).toBe(0);
  });

  it('a multipart upload holds what its parts hold: parts refused past the quota, given back on abort, failure or an unchanged re-upload, settled by completion', async () => {
    const repository = 'quota-multipart';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const json = async (method: string, url: string, body?: unknown, raw?: Buffer) => {
      const res = await fetch(url, {
        method,
        headers: { ...bearer(writer.key), 'content-type': raw ? 'application/octet-stream' : 'application/json' },
        ...(raw ? { body: raw } : body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
    };
    const usage = async () =>
      (await db.pool.query<{ n: string }>(`SELECT coalesce(sum(bytes), 0)::text AS n FROM arkvory_quota_reservations`))
        .rows[0]!.n;
    await limitRepositoryTo1000(repository);
    const start = (name: string, declared: Record<string, unknown>) =>
      json('POST', `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}/uploads`, declared);
    const session = (id: unknown) => `${gw.url}/api/v1/repositories/${repository}/uploads/${String(id)}`;
    const putPart = (id: unknown, bytes: Buffer) => json('PUT', `${session(id)}/parts/1`, undefined, bytes);
    const complete = async (id: unknown, bytes: Buffer) => {
      const sha256 = createHash('sha256').update(bytes).digest('hex');
      expect((await json('POST', `${session(id)}/complete`, { parts: [{ partNumber: 1, sha256 }] })).status).toBe(202);
      let state: unknown;
      await waitUntil(
        async () => ['done', 'failed'].includes(String((state = (await json('GET', session(id))).body.state))),
        {
          what: 'the multipart upload to end',
          timeoutMs: 60_000,
        },
      );
      return state;
    };

    const refused = await start('too-big', { size: 1001 });
    expect(refused).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', quotaBytes: 1000, remainingBytes: 1000, requestedBytes: 1001 },
    });
    expect((await db.pool.query('SELECT id FROM arkvory_upload_sessions')).rows).toEqual([]);

    // Declared sizes are checked, not held: a session that sends nothing holds nothing.
    const aborted = await start('aborted', { size: 600 });
    expect(aborted.status).toBe(201);
    expect(await usage()).toBe('0');
    const sizeless = await start('published', {});
    expect(sizeless.status).toBe(201);
    expect((await putPart(aborted.body.upload, Buffer.alloc(600, 1))).status).toBe(200);
    expect(await usage()).toBe('600');
    // A part sent again replaces the first: the bytes it replaces are not counted with it.
    expect((await putPart(aborted.body.upload, Buffer.alloc(600, 5))).body).toMatchObject({ sizeBytes: 600 });
    expect(await usage()).toBe('600');
    // A session that declared no size is held to the quota by its parts.
    expect((await putPart(sizeless.body.upload, Buffer.alloc(600, 2))).body).toMatchObject({
      code: 'quota_exceeded',
      remainingBytes: 400,
    });
    expect(await usage()).toBe('600');
    const part = Buffer.alloc(400, 3);
    expect((await putPart(sizeless.body.upload, part)).status).toBe(200);
    expect(await usage()).toBe('1000');
    expect((await json('DELETE', session(aborted.body.upload))).status).toBe(204);
    expect(await usage()).toBe('400');

    expect(await complete(sizeless.body.upload, part)).toBe('done');
    expect(await usage()).toBe('0'); // settled by the completion's catalog insert
    const stored = await db.pool.query<{ n: string }>(
      `SELECT sum(size_bytes)::text AS n FROM arkvory_artifacts WHERE repository = $1`,
      [repository],
    );
    expect(stored.rows[0]!.n).toBe('400');

    // The same bytes again (a client's retry): nothing is published, and nothing stays held.
    const retried = await start('published', {});
    expect((await putPart(retried.body.upload, part)).status).toBe(200);
    expect(await usage()).toBe('400');
    expect(await complete(retried.body.upload, part)).toBe('done');
    expect(await usage()).toBe('0');
    // A completion that fails (the declared digest is not the parts') gives its parts' bytes back.
    const failing = await start('failing', { sha256: '0'.repeat(64) });
    expect((await putPart(failing.body.upload, Buffer.alloc(100, 4))).status).toBe(200);
    expect(await usage()).toBe('100');
    expect(await complete(failing.body.upload, Buffer.alloc(100, 4))).toBe('failed');
    expect(await usage()).toBe('0');

    expect((await json('GET', `${gw.url}/api/v1/admin/quotas/repositories/${repository}`)).status).toBe(403);
    expect((await start('full', { size: 601 })).body).toMatchObject({
      code: 'quota_exceeded',
      usageBytes: 400,
      remainingBytes: 600,
    });
    expect(await gw.stop()).toBe(0);
  });

  it('a writer killed as it aborts a session leaves it open and held, or aborted and given back: never aborted and held', async () => {
    const repository = 'quota-abort-killed';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    let gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await limitRepositoryTo1000(repository);
    const started = await fetch(`${gw.url}/api/v1/repositories/${repository}/artifacts/abandoned/uploads`, {
      method: 'POST',
      headers: { ...bearer(writer.key), 'content-type': 'application/json' },
      body: '{}',
    });
    const upload = ((await started.json()) as { upload: string }).upload;
    const session = () => `${gw.url}/api/v1/repositories/${repository}/uploads/${upload}`;
    expect((await put(`${session()}/parts/1`, writer.key, Buffer.alloc(600, 1))).status).toBe(200);
    const now = async () => ({
      state: (
        await db.pool.query<{ state: string }>('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [upload])
      ).rows[0]!.state,
      held: (await db.pool.query<{ bytes: string }>('SELECT bytes::text FROM arkvory_quota_reservations')).rows,
    });
    expect(await now()).toEqual({ state: 'open', held: [{ bytes: '600' }] });
    // The writer dies as its abort gives the session's hold back: held up there, then killed, its
    // statement never run (its backend ended too: one waiting on a lock would not see it go).
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE arkvory_quota_reservations IN EXCLUSIVE MODE');
      const aborting = fetch(session(), { method: 'DELETE', headers: bearer(writer.key) }).catch(() => undefined);
      let waiting: number | undefined;
      await waitUntil(
        async () =>
          (waiting = (
            await db.pool.query<{ pid: number }>(
              `SELECT pid FROM pg_locks WHERE relation = 'arkvory_quota_reservations'::regclass AND NOT granted`,
            )
          ).rows[0]?.pid) !== undefined,
        { what: 'the abort to give the hold back', timeoutMs: 20_000 },
      );
      expect(await gw.stop('SIGKILL')).toBe('SIGKILL');
      await db.pool.query('SELECT pg_terminate_backend($1)', [waiting]);
      await aborting;
      await locker.query('COMMIT');
    } finally {
      locker.release();
    }
    // Nothing done: the session and its hold stand together. Before, it was aborted and its 600
    // bytes stayed held until it expired a day later; a DELETE sent again answered 409.
    expect(await now()).toEqual({ state: 'open', held: [{ bytes: '600' }] });
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, dataDir: gw.dataDir });
    expect((await fetch(session(), { method: 'DELETE', headers: bearer(writer.key) })).status).toBe(204);
    expect(await now()).toEqual({ state: 'aborted', held: [] });
    expect(
      (await put(`${gw.url}/api/v1/repositories/${repository}/artifacts/after`, writer.key, Buffer.alloc(1000, 2)))
        .status,
    ).toBe(201);
    expect(await gw.stop()).toBe(0);
  });

  it('a part recorded as its session is completed stays held until the completion publishes: no upload takes its room meanwhile', async () => {
    const repository = 'quota-part-race';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    // No completion worker yet: the job waits, queued, while the part's bytes must stay held.
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
    await limitRepositoryTo1000(repository);
    const base = `${gw.url}/api/v1/repositories/${repository}`;
    const upload = await startAssembledSession(base, writer.key);
    const part = Buffer.alloc(600, 5);
    // The part's body stops halfway, its 600 bytes reserved, until every write to the reservations waits.
    const partReq = http.request(`${base}/uploads/${upload}/parts/1`, {
      method: 'PUT',
      agent: false,
      headers: { ...bearer(writer.key), 'content-type': 'application/octet-stream', 'content-length': '600' },
    });
    const partAnswer = new Promise<number>((resolve, reject) => {
      partReq.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      partReq.on('error', reject);
    });
    partReq.write(part.subarray(0, 300));
    const reserved = async () =>
      (await db.pool.query<{ id: string; bytes: string }>('SELECT id, bytes::text FROM arkvory_quota_reservations'))
        .rows;
    await waitUntil(async () => (await reserved()).some((r) => r.bytes === '600'), { what: "the part's reservation" });
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE arkvory_quota_reservations IN EXCLUSIVE MODE');
      partReq.end(part.subarray(300));
      await waitUntil(
        async () =>
          ((
            await db.pool.query(
              `SELECT 1 FROM pg_locks WHERE relation = 'arkvory_quota_reservations'::regclass AND NOT granted`,
            )
          ).rowCount ?? 0) > 0,
        { what: "the part's bytes waiting to be held for its session", timeoutMs: 20_000 },
      );
      // The completion is asked for while the part is being recorded, listing it (a client that
      // sends it once its part's bytes went out).
      let completed: number | undefined;
      const completing = fetch(`${base}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(writer.key), 'content-type': 'application/json' },
        body: JSON.stringify({ parts: [{ partNumber: 1, sha256: createHash('sha256').update(part).digest('hex') }] }),
      }).then((res) => (completed = res.status));
      // Answered at once, or waiting for the part's recording to end.
      await waitUntil(
        async () =>
          completed !== undefined ||
          ((
            await db.pool.query(
              `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM arkvory_upload_sessions%FOR UPDATE%'`,
            )
          ).rowCount ?? 0) > 0,
        { what: 'the completion to be asked for', timeoutMs: 20_000 },
      );
      await locker.query('COMMIT');
      expect(await partAnswer).toBe(200);
      expect(await completing).toBe(202);
    } finally {
      locker.release();
    }
    // Queued, not yet published: the session holds its part's 600 bytes, so 600 more do not fit.
    expect(await reserved()).toEqual([{ id: upload, bytes: '600' }]);
    expect(await put(`${base}/artifacts/other`, writer.key, Buffer.alloc(600, 6))).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', usageBytes: 600, remainingBytes: 400 },
    });
    const worker = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' },
      dataDir: gw.dataDir,
    });
    await waitUntil(
      async () =>
        (await db.pool.query(`SELECT 1 FROM arkvory_upload_sessions WHERE id = $1 AND state = 'done'`, [upload]))
          .rowCount === 1,
      { what: 'the completion', timeoutMs: 60_000 },
    );
    const stored = await db.pool.query<{ n: string }>(
      'SELECT sum(size_bytes)::text AS n FROM arkvory_artifacts WHERE repository = $1',
      [repository],
    );
    expect(stored.rows[0]!.n).toBe('600');
    expect(await reserved()).toEqual([]);
    expect(await worker.stop()).toBe(0);
    expect(await gw.stop()).toBe(0);
  });

  it("a queued completion keeps its session's room past the session's expiry until it ends; the same completion asked again is answered 202, not 409", async () => {
    const repository = 'quota-completing-held';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    // No completion worker yet: the job waits, queued (a stalled worker, a store failure waited out).
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
    await limitRepositoryTo1000(repository);
    const base = `${gw.url}/api/v1/repositories/${repository}`;
    const upload = await startAssembledSession(base, writer.key);
    const part = Buffer.alloc(600, 9);
    expect((await put(`${base}/uploads/${upload}/parts/1`, writer.key, part)).status).toBe(200);
    const complete = async (sha256: string) => {
      const res = await fetch(`${base}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(writer.key), 'content-type': 'application/json' },
        body: JSON.stringify({ parts: [{ partNumber: 1, sha256 }] }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const digest = createHash('sha256').update(part).digest('hex');
    const first = await complete(digest);
    expect(first).toMatchObject({ status: 202, body: { state: 'completing', totalBytes: 600 } });
    // Its answer lost, the client sends the same completion again: the same job, nothing more queued.
    expect(await complete(digest)).toMatchObject({ status: 202, body: { job: first.body.job, totalBytes: 600 } });
    expect(await complete('0'.repeat(64))).toMatchObject({ status: 409, body: { code: 'conflict' } });
    const jobs = await db.pool.query('SELECT 1 FROM arkvory_upload_jobs WHERE session_id = $1', [upload]);
    expect(jobs.rowCount).toBe(1);
    // Time passes to a second past the session's expiry, the completion still queued.
    await db.pool.query(
      `WITH s AS (SELECT expires_at - now() + interval '1 second' AS by FROM arkvory_upload_sessions WHERE id = $1)
       UPDATE arkvory_quota_reservations r SET expires_at = r.expires_at - s.by FROM s WHERE r.id = $1`,
      [upload],
    );
    await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, [
      upload,
    ]);
    expect(await put(`${base}/artifacts/other`, writer.key, Buffer.alloc(600, 10))).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', usageBytes: 600, remainingBytes: 400 },
    });
    const worker = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' },
      dataDir: gw.dataDir,
    });
    await waitUntil(
      async () =>
        (await db.pool.query(`SELECT 1 FROM arkvory_upload_sessions WHERE id = $1 AND state = 'done'`, [upload]))
          .rowCount === 1,
      { what: 'the completion', timeoutMs: 60_000 },
    );
    // Its end gave the hold up; asked again once done, the answer is the same completion, done.
    expect(
      (await db.pool.query('SELECT 1 FROM arkvory_quota_reservations WHERE repository = $1', [repository])).rowCount,
    ).toBe(0);
    expect(await complete(digest)).toMatchObject({ status: 202, body: { state: 'done', job: first.body.job } });
    expect(await worker.stop()).toBe(0);
    expect(await gw.stop()).toBe(0);
  });

  it('a quota set while uploads run that met none, or a reservation lost while its upload runs: the bytes are decided before they are published', async () => {
    const repository = 'quota-set-midway';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '3' } });
    const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
    /** A PUT whose body is sent in two halves, the second when the test says. */
    const halves = (name: string, body: Buffer, chunked: boolean) => {
      const req = http.request(artifact(name), {
        method: 'PUT',
        agent: false,
        headers: {
          ...bearer(writer.key),
          'content-type': 'application/octet-stream',
          ...(chunked ? { 'transfer-encoding': 'chunked' } : { 'content-length': String(body.length) }),
        },
      });
      const answer = new Promise<Answer>((resolve, reject) => {
        req.on('response', (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString()), continued: false }),
          );
        });
        req.on('error', reject);
      });
      req.write(body.subarray(0, body.length / 2));
      return { answer, finish: () => req.end(body.subarray(body.length / 2)) };
    };
    // Both started with no quota in force: each reserved nothing and is staging its first half.
    const sized = halves('sized', Buffer.alloc(600, 1), false);
    const chunked = halves('chunked', Buffer.alloc(300, 2), true);
    await waitUntil(async () => (await filesUnder(path.join(gw.dataDir, 'tmp'))).length === 2, {
      what: 'both uploads staging',
    });
    await limitRepositoryTo1000(repository);
    expect((await put(artifact('later'), writer.key, Buffer.alloc(600, 3))).status).toBe(201);
    sized.finish();
    expect(await sized.answer).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', quotaBytes: 1000, usageBytes: 600, remainingBytes: 400, requestedBytes: 600 },
    });
    chunked.finish();
    expect((await chunked.answer).status).toBe(201);
    // A reservation lost while its upload ran (its renewals failed past its time to live, and another
    // reservation deleted it) is decided again before the bytes are published.
    const lapsed = halves('lapsed', Buffer.alloc(100, 4), false);
    await waitUntil(
      async () => ((await db.pool.query('SELECT 1 FROM arkvory_quota_reservations')).rowCount ?? 0) === 1,
      { what: "the upload's reservation" },
    );
    await db.pool.query('DELETE FROM arkvory_quota_reservations');
    expect((await put(artifact('took-its-room'), writer.key, Buffer.alloc(100, 5))).status).toBe(201);
    lapsed.finish();
    expect(await lapsed.answer).toMatchObject({
      status: 507,
      body: { code: 'quota_exceeded', usageBytes: 1000, remainingBytes: 0, requestedBytes: 100 },
    });
    const stored = await db.pool.query<{ name: string; size_bytes: string }>(
      'SELECT name, size_bytes::text FROM arkvory_artifacts WHERE repository = $1 ORDER BY name',
      [repository],
    );
    expect(stored.rows).toEqual([
      { name: 'chunked', size_bytes: '300' },
      { name: 'later', size_bytes: '600' },
      { name: 'took-its-room', size_bytes: '100' },
    ]);
    expect(await filesUnder(path.join(gw.dataDir, 'tmp'))).toEqual([]);
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });

  it('a multipart completion whose session holds less than its whole (parts sent before the quota was set) is decided by its bytes before they are published', async () => {
    const repository = 'quota-mp-unheld';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const base = `${gw.url}/api/v1/repositories/${repository}`;
    const json = async (method: string, url: string, body?: unknown, raw?: Buffer) => {
      const res = await fetch(url, {
        method,
        headers: { ...bearer(writer.key), 'content-type': raw ? 'application/octet-stream' : 'application/json' },
        ...(raw ? { body: raw } : body ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    /** Completes a session of one part; its final state and error. */
    const complete = async (upload: unknown, part: Buffer) => {
      const sha256 = createHash('sha256').update(part).digest('hex');
      const asked = await json('POST', `${base}/uploads/${String(upload)}/complete`, {
        parts: [{ partNumber: 1, sha256 }],
      });
      expect(asked.status).toBe(202);
      let session: Record<string, unknown> = {};
      await waitUntil(
        async () =>
          ['done', 'failed'].includes(
            String((session = (await json('GET', `${base}/uploads/${String(upload)}`)).body).state),
          ),
        { what: 'the multipart upload to end', timeoutMs: 60_000 },
      );
      return { state: session.state, error: session.error };
    };
    const first = await json('POST', `${base}/artifacts/first/uploads`, {});
    const second = await json('POST', `${base}/artifacts/second/uploads`, {});
    const held = await json('POST', `${base}/artifacts/held/uploads`, {});
    const mixed = await json('POST', `${base}/artifacts/mixed/uploads`, {});
    const resent = await json('POST', `${base}/artifacts/resent/uploads`, {});
    const part = (fill: number) => Buffer.alloc(600, fill);
    expect(
      (await json('PUT', `${base}/uploads/${String(resent.body.upload)}/parts/1`, undefined, part(5))).status,
    ).toBe(200);
    expect((await json('PUT', `${base}/uploads/${String(first.body.upload)}/parts/1`, undefined, part(1))).status).toBe(
      200,
    );
    expect(
      (await json('PUT', `${base}/uploads/${String(second.body.upload)}/parts/1`, undefined, part(2))).status,
    ).toBe(200);
    expect((await json('PUT', `${base}/uploads/${String(mixed.body.upload)}/parts/1`, undefined, part(3))).status).toBe(
      200,
    );
    // Sent with no quota in force: no session holds anything.
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    await limitRepositoryTo1000(repository);
    expect(await complete(first.body.upload, part(1))).toEqual({ state: 'done', error: null });
    expect(await complete(second.body.upload, part(2))).toEqual({
      state: 'failed',
      error: expect.stringMatching(
        /^quota_exceeded: The repository quota of 1000 bytes has 400 bytes left; this upload needs 600\.$/,
      ),
    });
    // A part sent again under the quota in place of one sent before it adds nothing to check, and
    // so nothing to the session's hold: the completion is still decided on the whole.
    expect(
      (await json('PUT', `${base}/uploads/${String(resent.body.upload)}/parts/1`, undefined, part(6))).status,
    ).toBe(200);
    expect(
      (await db.pool.query('SELECT bytes::text FROM arkvory_quota_reservations WHERE id = $1', [resent.body.upload]))
        .rows,
    ).toEqual([{ bytes: '0' }]);
    expect(await complete(resent.body.upload, part(6))).toEqual({
      state: 'failed',
      error: expect.stringMatching(/^quota_exceeded: .* this upload needs 600\.$/),
    });
    // A part sent under the quota holds its own bytes, not those of the parts sent before it; the
    // completion is decided on the rest.
    const last = Buffer.alloc(100, 4);
    expect((await json('PUT', `${base}/uploads/${String(mixed.body.upload)}/parts/2`, undefined, last)).status).toBe(
      200,
    );
    expect(
      (await db.pool.query('SELECT bytes::text FROM arkvory_quota_reservations WHERE id = $1', [mixed.body.upload]))
        .rows,
    ).toEqual([{ bytes: '100' }]);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    expect(
      (
        await json('POST', `${base}/uploads/${String(mixed.body.upload)}/complete`, {
          parts: [
            { partNumber: 1, sha256: sha(part(3)) },
            { partNumber: 2, sha256: sha(last) },
          ],
        })
      ).status,
    ).toBe(202);
    let mixedEnd: Record<string, unknown> = {};
    await waitUntil(
      async () =>
        ['done', 'failed'].includes(
          String((mixedEnd = (await json('GET', `${base}/uploads/${String(mixed.body.upload)}`)).body).state),
        ),
      { what: 'the mixed upload to end', timeoutMs: 60_000 },
    );
    expect({ state: mixedEnd.state, error: mixedEnd.error }).toEqual({
      state: 'failed',
      error: expect.stringMatching(/^quota_exceeded: .* this upload needs 700\.$/),
    });
    // Bytes the repository already holds cost nothing more.
    expect((await json('PUT', `${base}/uploads/${String(held.body.upload)}/parts/1`, undefined, part(1))).status).toBe(
      507,
    );
    await db.pool.query('DELETE FROM arkvory_storage_quotas WHERE subject = $1', [repository]);
    expect((await json('PUT', `${base}/uploads/${String(held.body.upload)}/parts/1`, undefined, part(1))).status).toBe(
      200,
    );
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, 600)`,
      [repository],
    );
    expect(await complete(held.body.upload, part(1))).toEqual({ state: 'done', error: null });
    const stored = await db.pool.query<{ name: string }>(
      'SELECT name FROM arkvory_artifacts WHERE repository = $1 ORDER BY name',
      [repository],
    );
    expect(stored.rows).toEqual([{ name: 'first' }, { name: 'held' }]);
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });

  it("a completion's room stays held while its bytes are committed: its session's expiry passing meanwhile gives no other upload that room", async () => {
    const repository = 'quota-mp-commit';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await limitRepositoryTo1000(repository);
    const base = `${gw.url}/api/v1/repositories/${repository}`;
    const upload = await startAssembledSession(base, writer.key);
    // A session near its end (ARKVORY_UPLOAD_SESSION_TTL_SECONDS after it began): its part's hold
    // lasts as long as the session.
    await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() + interval '10 seconds' WHERE id = $1`, [
      upload,
    ]);
    const part = Buffer.alloc(600, 8);
    const sha256 = createHash('sha256').update(part).digest('hex');
    const sent = await fetch(`${base}/uploads/${upload}/parts/1`, {
      method: 'PUT',
      headers: { ...bearer(writer.key), 'content-type': 'application/octet-stream' },
      body: part,
    });
    expect(sent.status).toBe(200);
    // The completion's catalog insert waits behind an uncommitted row of the same name, as a commit
    // of its bytes that takes long (an S3 copy of a large blob, read back) keeps it from the insert.
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO arkvory_artifacts (repository, kind, name, sha256, size_bytes, content_type)
         VALUES ($1, 'artifact', 'assembled', $2, 600, 'application/octet-stream')`,
        [repository, sha256],
      );
      const completed = await fetch(`${base}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(writer.key), 'content-type': 'application/json' },
        body: JSON.stringify({ parts: [{ partNumber: 1, sha256 }] }),
      });
      expect(completed.status).toBe(202);
      await waitUntil(
        async () =>
          ((
            await db.pool.query(
              `SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO arkvory_artifacts%'`,
            )
          ).rowCount ?? 0) > 0,
        { what: "the completion's catalog insert waiting", timeoutMs: 30_000 },
      );
      // Admitted on the session's hold, then committing past the session's expiry.
      await waitUntil(
        async () =>
          ((await db.pool.query('SELECT 1 FROM arkvory_upload_sessions WHERE id = $1 AND expires_at < now()', [upload]))
            .rowCount ?? 0) > 0,
        { what: "the session's expiry", timeoutMs: 30_000 },
      );
      expect(await put(`${base}/artifacts/other`, writer.key, Buffer.alloc(600, 9))).toMatchObject({
        status: 507,
        continued: false,
        body: { code: 'quota_exceeded', usageBytes: 600, remainingBytes: 400 },
      });
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
    let state: unknown;
    await waitUntil(
      async () =>
        ['done', 'failed'].includes(
          String(
            (state = (await db.pool.query('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [upload])).rows[0]
              ?.state),
          ),
        ),
      { what: 'the completion', timeoutMs: 60_000 },
    );
    expect(state).toBe('done');
    const stored = await db.pool.query<{ name: string; size_bytes: string }>(
      'SELECT name, size_bytes::text FROM arkvory_artifacts WHERE repository = $1',
      [repository],
    );
    expect(stored.rows).toEqual([{ name: 'assembled', size_bytes: '600' }]);
    expect((await db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });

  it('under a full quota a part is told what became of its session (400, 404, 409, 410) before any quota: never 507', async () => {
    const repository = 'quota-full-parts';
    await createRepository(db.pool, repository);
    const writer = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const other = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
    const base = `${gw.url}/api/v1/repositories/${repository}`;
    await limitRepositoryTo1000(repository);
    const part = (upload: string, n: number | string, key = writer.key) =>
      put(`${base}/uploads/${upload}/parts/${n}`, key, Buffer.alloc(10, 1));
    const withPart = await startAssembledSession(base, writer.key);
    const completing = await startAssembledSession(base, writer.key);
    const aborted = await startAssembledSession(base, writer.key);
    const expired = await startAssembledSession(base, writer.key);
    const empty = createHash('sha256').digest('hex');
    expect((await put(`${base}/uploads/${completing}/parts/1`, writer.key, Buffer.alloc(0))).status).toBe(200);
    const completed = await fetch(`${base}/uploads/${completing}/complete`, {
      method: 'POST',
      headers: { ...bearer(writer.key), 'content-type': 'application/json' },
      body: JSON.stringify({ parts: [{ partNumber: 1, sha256: empty }] }),
    });
    expect(completed.status).toBe(202);
    expect((await fetch(`${base}/uploads/${aborted}`, { method: 'DELETE', headers: bearer(writer.key) })).status).toBe(
      204,
    );
    await db.pool.query('UPDATE arkvory_upload_sessions SET expires_at = now() WHERE id = $1', [expired]);
    // The quota is full: one session holds all of it.
    expect((await put(`${base}/uploads/${withPart}/parts/1`, writer.key, Buffer.alloc(1000, 2))).status).toBe(200);
    expect((await part(withPart, 2)).body).toMatchObject({ code: 'quota_exceeded' });

    const answers = [
      await part(completing, 2),
      await part(aborted, 1),
      await part(expired, 1),
      await part('00000000-0000-4000-8000-000000000000', 1),
      await part(withPart, 2, other.key),
      await part(withPart, 0),
    ];
    expect(answers.map((a) => [a.status, a.body.code, a.continued])).toEqual([
      [409, 'conflict', false],
      [409, 'conflict', false],
      [410, 'upload_expired', false],
      [404, 'not_found', false],
      [404, 'not_found', false],
      [400, 'invalid_request', false],
    ]);
    expect(await gw.stop()).toBe(0);
  });

  it('on a real S3 server (SeaweedFS): the refused uploads put nothing in the bucket, a cut one leaves nothing staged', async () => {
    // A database of its own: one is bound to one storage root, and the others here use a directory.
    const s3db = await createTestDatabase();
    const server = await sharedS3Bucket('seaweedfs');
    try {
      const repository = 'quota-s3';
      await createRepository(s3db.pool, repository);
      const writer = await createServiceAccount(s3db.pool, { grants: { [repository]: 'write' } });
      const gw = await startGateway({
        env: { ARKVORY_DATABASE_URL: s3db.url, ...server.env('arkvory/') },
        timeoutMs: 60_000,
      });
      const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
      await s3db.pool.query(
        `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, $2)`,
        [repository, 12 * MiB],
      );
      const answers = await Promise.all(
        Array.from({ length: 6 }, (_, i) => put(artifact(`s3-${i}`), writer.key, payload(500 + i, 4 * MiB))),
      );
      expect(answers.filter((a) => a.status === 201)).toHaveLength(3);
      const refused = answers.filter((a) => a.status !== 201);
      expect(refused.map((a) => [a.status, a.continued, a.body.code])).toEqual(
        Array.from({ length: 3 }, () => [507, false, 'quota_exceeded']),
      );
      expect(await listKeys(server, 'arkvory/blobs/')).toHaveLength(3);
      expect(await listKeys(server, 'arkvory/tmp/')).toEqual([]);
      const cut = await put(artifact('s3-chunked'), writer.key, payload(600, 2 * MiB), true);
      expect(cut).toMatchObject({ status: 507, body: { code: 'quota_exceeded', remainingBytes: 0 } });
      expect(await listKeys(server, 'arkvory/blobs/')).toHaveLength(3);
      expect(await listKeys(server, 'arkvory/tmp/')).toEqual([]);
      expect((await s3db.pool.query('SELECT id FROM arkvory_quota_reservations')).rows).toEqual([]);
      expect(await gw.stop()).toBe(0);
    } finally {
      await server.destroy();
      await s3db.drop();
    }
  });
});
