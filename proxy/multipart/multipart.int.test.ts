/**
 * Multipart uploads with real processes: sessions on the writer, parts streamed to disk, the
 * completion worker (embedded or a separate, single active process) publishing atomically.
 */
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { readdir, rename, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const db = useTestDatabase();
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'mp');
  ({ key } = await createServiceAccount(db.pool, { grants: { mp: 'write' } }));
});

const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;

async function openSession(gw: GatewayProcess, id: string, body: Record<string, unknown> = {}): Promise<string> {
  const r = await request(`${gw.url}/api/v1/repositories/mp/artifacts/${id}/uploads`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify(body)),
  });
  expect(r.status, r.body.toString()).toBe(201);
  return json(r).upload as string;
}

async function putPart(
  gw: GatewayProcess,
  upload: string,
  n: number,
  data: Buffer,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}/parts/${n}`, {
    method: 'PUT',
    headers: bearer(key),
    body: data,
  });
  return { status: r.status, body: json(r) };
}

async function complete(
  gw: GatewayProcess,
  upload: string,
  parts: Array<{ partNumber: number; sha256: string }>,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}/complete`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify({ parts })),
  });
  return { status: r.status, body: json(r) };
}

async function waitForState(
  gw: GatewayProcess,
  upload: string,
  states: string[],
  timeoutMs = 60_000,
): Promise<Record<string, unknown>> {
  let s: Record<string, unknown> = {};
  await waitUntil(
    async () => {
      s = json(await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) }));
      return states.includes(s.state as string);
    },
    { what: `upload ${upload} to be ${states.join(' or ')}`, timeoutMs },
  );
  return s;
}

const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Uploads `parts` and completes them; resolves with the upload id. */
async function uploadInParts(gw: GatewayProcess, id: string, parts: Buffer[]): Promise<string> {
  const upload = await openSession(gw, id, { size: parts.reduce((n, p) => n + p.length, 0) });
  for (const [i, p] of parts.entries()) expect((await putPart(gw, upload, i + 1, p)).status).toBe(200);
  const done = await complete(
    gw,
    upload,
    parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })),
  );
  expect(done.status, JSON.stringify(done.body)).toBe(202);
  return upload;
}

describe('multipart uploads (embedded worker)', () => {
  // One gateway for these four: each works on its own artifact and session. Stopped with the block,
  // so the next block's writer is the only one completing jobs.
  let gw: GatewayProcess;
  beforeAll(async () => {
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
  });
  afterAll(async () => {
    expect(await gw.stop()).toBe(0);
  });

  it('a 3-part upload of 30 MiB completes to the exact bytes; re-sending a part replaces it', async () => {
    const file = randomContent(30 * MiB);
    const parts = [file.subarray(0, 12 * MiB), file.subarray(12 * MiB, 24 * MiB), file.subarray(24 * MiB)];
    const upload = await openSession(gw, 'thirty.bin', { size: file.length, sha256: sha256(file) });
    expect((await putPart(gw, upload, 2, randomContent(1000))).status).toBe(200);
    for (const [i, p] of parts.entries())
      expect((await putPart(gw, upload, i + 1, p)).body).toEqual({
        partNumber: i + 1,
        sizeBytes: p.length,
        sha256: digest(p),
      });
    const listed = json(await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) }));
    expect((listed.parts as unknown[]).length).toBe(3);
    const accepted = await complete(
      gw,
      upload,
      parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })),
    );
    expect(accepted.status).toBe(202);
    expect(accepted.body).toMatchObject({ state: 'completing', totalBytes: file.length });
    const done = await waitForState(gw, upload, ['done', 'failed']);
    expect(done).toMatchObject({
      state: 'done',
      error: null,
      artifact: { sha256: sha256(file), sizeBytes: file.length },
    });
    const got = await request(`${gw.url}/api/v1/repositories/mp/artifacts/thirty.bin/content`, {
      headers: bearer(key),
    });
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(file));
    // The parts are gone once published.
    const left = await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = $1', [
      upload,
    ]);
    expect(left.rows[0].n).toBe(0);
  });

  it('a client reset mid-part leaves nothing: no row, no file, its quota reservation and upload slot given back', async () => {
    await createRepository(db.pool, 'mp-reset');
    const writer = await createServiceAccount(db.pool, { grants: { 'mp-reset': 'write' } });
    // A quota that fits: the part is then reserved as it arrives, and its reservation must go.
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', 'mp-reset', $1)`,
      [100 * MiB],
    );
    const base = `${gw.url}/api/v1/repositories/mp-reset`;
    const opened = await request(`${base}/artifacts/reset.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(writer.key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    const upload = json(opened).upload as string;
    const files = () => readdir(path.join(gw.dataDir, 'uploads', upload)).catch(() => [] as string[]);
    const reserved = async () =>
      (
        await db.pool.query<{ n: number; bytes: number }>(
          `SELECT count(*)::int AS n, coalesce(sum(bytes), 0)::int AS bytes FROM arkvory_quota_reservations
            WHERE repository = 'mp-reset' AND expires_at > now()`,
        )
      ).rows[0]!;
    const part = randomContent(MiB);
    const req = http.request(`${base}/uploads/${upload}/parts/1`, {
      method: 'PUT',
      headers: { ...bearer(writer.key), 'content-length': String(part.length) },
      agent: false,
    });
    req.on('error', () => {});
    req.write(part.subarray(0, 256 * 1024));
    await waitUntil(async () => (await files()).length === 1 && (await reserved()).n === 1, {
      what: 'the part to be on its way to disk, its bytes reserved',
      timeoutMs: 10_000,
    });
    req.destroy();
    await waitUntil(async () => (await files()).length === 0 && (await reserved()).n === 0, {
      what: "the reset part's file and reservation gone",
      timeoutMs: 10_000,
    });
    // The principal's one upload slot (ARKVORY_MAX_UPLOADS_PER_PRINCIPAL) is free again: sent whole, it is taken.
    const again = await request(`${base}/uploads/${upload}/parts/1`, {
      method: 'PUT',
      headers: bearer(writer.key),
      body: part,
    });
    expect(again.status, again.body.toString()).toBe(200);
    const session = json(await request(`${base}/uploads/${upload}`, { headers: bearer(writer.key) }));
    expect(session.parts).toEqual([{ partNumber: 1, sizeBytes: part.length, sha256: digest(part) }]);
    expect(await files()).toHaveLength(1);
    // Held once: the session's hold carries the part, the reset one left nothing behind.
    expect(await reserved()).toEqual({ n: 1, bytes: part.length });
  });

  it('refuses a wrong part digest, a missing part, a wrong order and an expired session, publishing nothing', async () => {
    const a = randomContent(1000);
    const b = randomContent(2000);
    const upload = await openSession(gw, 'refused.bin');
    await putPart(gw, upload, 1, a);
    await putPart(gw, upload, 2, b);
    const cases: Array<[Array<{ partNumber: number; sha256: string }>, number, string]> = [
      [
        [
          { partNumber: 1, sha256: digest(a) },
          { partNumber: 2, sha256: digest(a) },
        ],
        400,
        'part_mismatch',
      ],
      [
        [
          { partNumber: 1, sha256: digest(a) },
          { partNumber: 3, sha256: digest(b) },
        ],
        400,
        'part_missing',
      ],
      [
        [
          { partNumber: 2, sha256: digest(b) },
          { partNumber: 1, sha256: digest(a) },
        ],
        400,
        'parts_out_of_order',
      ],
    ];
    for (const [parts, status, code] of cases) {
      const r = await complete(gw, upload, parts);
      expect(r.status).toBe(status);
      expect(r.body.code).toBe(code);
    }
    await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, [
      upload,
    ]);
    const expired = await complete(gw, upload, [{ partNumber: 1, sha256: digest(a) }]);
    expect(expired.status).toBe(410);
    expect(expired.body.code).toBe('upload_expired');
    expect((await putPart(gw, upload, 3, a)).body.code).toBe('upload_expired');
    expect(
      (await request(`${gw.url}/api/v1/repositories/mp/artifacts/refused.bin/content`, { headers: bearer(key) }))
        .status,
    ).toBe(404);
    // A session can be aborted; its parts are removed.
    const other = await openSession(gw, 'aborted.bin');
    await putPart(gw, other, 1, a);
    expect(
      (await request(`${gw.url}/api/v1/repositories/mp/uploads/${other}`, { method: 'DELETE', headers: bearer(key) }))
        .status,
    ).toBe(204);
    expect(
      json(await request(`${gw.url}/api/v1/repositories/mp/uploads/${other}`, { headers: bearer(key) })).state,
    ).toBe('aborted');
  });
  it('a part with a content coding is refused with 415 and not recorded: it would be assembled as its coded bytes', async () => {
    const upload = await openSession(gw, 'coded.bin');
    const r = await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}/parts/1`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-encoding': 'gzip' },
      body: gzipSync(randomContent(1000)),
    });
    expect(r.status, r.body.toString()).toBe(415);
    expect(json(r)).toMatchObject({ code: 'unsupported_content_encoding' });
    const session = json(await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) }));
    expect(session.parts).toEqual([]);
  });

  it('a completion that fails for a passing fault of ours is tried again after waits that grow, and publishes once it passes', async () => {
    const a = randomContent(1000);
    const upload = await openSession(gw, 'retried.bin');
    expect((await putPart(gw, upload, 1, a)).status).toBe(200);
    // The staging directory made unusable (ENOTDIR on every stage: an fs failure of ours).
    const tmp = path.join(gw.dataDir, 'tmp');
    await rename(tmp, `${tmp}.away`);
    await writeFile(tmp, '');
    const attempts = async () =>
      (
        await db.pool.query<{ attempts: number; state: string }>(
          'SELECT j.attempts, s.state FROM arkvory_upload_jobs j JOIN arkvory_upload_sessions s ON s.id = j.session_id WHERE s.id = $1',
          [upload],
        )
      ).rows[0];
    try {
      expect((await complete(gw, upload, [{ partNumber: 1, sha256: digest(a) }])).status).toBe(202);
      // Two attempts failed; the third comes 4 s after the second (before, all five ran within
      // milliseconds and the session failed, its parts removed, for a fault that had passed a moment later).
      // Failed, not only claimed (a job's attempts count at its claim): each failure logs its retry.
      const retries = () => gw.logLines().filter((l) => l.event === 'upload.retry').length;
      await waitUntil(async () => retries() >= 2 || (await attempts())!.state !== 'completing', {
        what: 'two failed attempts',
        timeoutMs: 30_000,
      });
    } finally {
      await rm(tmp);
      await rename(`${tmp}.away`, tmp);
    }
    expect(await waitForState(gw, upload, ['done', 'failed'])).toMatchObject({ state: 'done', error: null });
    const got = await request(`${gw.url}/api/v1/repositories/mp/artifacts/retried.bin/content`, {
      headers: bearer(key),
    });
    expect(sha256(got.body)).toBe(sha256(a));
    expect(gw.logLines().filter((l) => l.event === 'upload.retry').length).toBeGreaterThanOrEqual(2);
  });

  it('a session takes the media types a whole upload takes: parameters, and at most 255 characters', async () => {
    const open = (id: string, contentType: string) =>
      request(`${gw.url}/api/v1/repositories/mp/artifacts/${id}/uploads`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ contentType })),
      });
    // Served back as the artifact's Content-Type: past 16 KiB no Node client could download it.
    for (const long of [`application/${'x'.repeat(244)}`, `application/${'x'.repeat(30_000)}`]) {
      const r = await open('long-type.bin', long);
      expect({ status: r.status, code: json(r).code }).toEqual({ status: 400, code: 'invalid_request' });
    }
    const a = randomContent(100);
    const typed = json(await open('typed.txt', 'text/plain; charset=utf-8'));
    expect(typed.contentType).toBe('text/plain; charset=utf-8');
    expect((await putPart(gw, typed.upload as string, 1, a)).status).toBe(200);
    expect((await complete(gw, typed.upload as string, [{ partNumber: 1, sha256: digest(a) }])).status).toBe(202);
    expect(await waitForState(gw, typed.upload as string, ['done', 'failed'])).toMatchObject({ state: 'done' });
    const got = await request(`${gw.url}/api/v1/repositories/mp/artifacts/typed.txt/content`, { headers: bearer(key) });
    expect(got.headers['content-type']).toBe('text/plain; charset=utf-8');
  });

  it('a completion list over its 2 MiB bound is answered 413 payload_too_large, with or without Content-Length; the session stays open', async () => {
    const upload = await openSession(gw, 'long-list.bin');
    const item = `{"partNumber":1,"sha256":"${'a'.repeat(64)}"},`;
    const list = Buffer.from(`{"parts":[${item.repeat(Math.ceil((3 * MiB) / item.length))}]}`);
    const url = `${gw.url}/api/v1/repositories/mp/uploads/${upload}/complete`;
    const headers = { ...bearer(key), 'content-type': 'application/json' };
    async function* chunked() {
      for (let at = 0; at < list.length; at += 64 * 1024) yield list.subarray(at, at + 64 * 1024);
    }
    for (const body of [list, chunked()]) {
      // The answer, not a reset: the gateway stops reading but keeps the connection for it.
      const r = await request(url, {
        method: 'POST',
        headers: body === list ? headers : { ...headers, 'transfer-encoding': 'chunked' },
        body,
      }).catch((err: Error) => ({ status: -1, body: Buffer.from(JSON.stringify({ error: err.message })) }));
      expect({ status: r.status, body: json(r) }).toMatchObject({
        status: 413,
        body: { code: 'payload_too_large' },
      });
    }
    expect(
      json(await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) })),
    ).toMatchObject({
      state: 'open',
    });
  });

  it('opening an upload needs a write grant and the write scope: a read grant (or a read-only key) gets 403 and no session', async () => {
    const readGrant = await createServiceAccount(db.pool, { grants: { mp: 'read' } });
    const readScope = await createServiceAccount(db.pool, { scopes: ['read'], grants: { mp: 'write' } });
    const paths = ['artifacts/denied.bin', 'packages/denied/1.0', 'packages/denied/1.0/assets/denied.tgz'];
    for (const who of [readGrant, readScope]) {
      for (const path of paths) {
        const r = await request(`${gw.url}/api/v1/repositories/mp/${path}/uploads`, {
          method: 'POST',
          headers: { ...bearer(who.key), 'content-type': 'application/json' },
          body: Buffer.from('{}'),
        });
        expect(r.status, `${path}: ${r.body.toString()}`).toBe(403);
        expect(json(r).code).toBe('forbidden');
      }
    }
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS n FROM arkvory_upload_sessions WHERE principal_id = ANY($1)',
      [[readGrant.principalId, readScope.principalId]],
    );
    expect(rows[0].n).toBe(0);
    // The same key may still read what its grant allows.
    expect(
      (await request(`${gw.url}/api/v1/repositories/mp/artifacts/denied.bin`, { headers: bearer(readGrant.key) }))
        .status,
    ).toBe(404);
  });

  it('a session belongs to the principal that opened it: another writer of the repository gets 404 for all of it', async () => {
    const other = await createServiceAccount(db.pool, { grants: { mp: 'write' } });
    const a = randomContent(1000);
    const upload = await openSession(gw, 'owned.bin');
    expect((await putPart(gw, upload, 1, a)).status).toBe(200);
    const base = `${gw.url}/api/v1/repositories/mp/uploads/${upload}`;
    const asOther = [
      await request(base, { headers: bearer(other.key) }),
      await request(`${base}/parts/2`, { method: 'PUT', headers: bearer(other.key), body: a }),
      await request(`${base}/complete`, {
        method: 'POST',
        headers: { ...bearer(other.key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ parts: [{ partNumber: 1, sha256: digest(a) }] })),
      }),
      await request(base, { method: 'DELETE', headers: bearer(other.key) }),
    ];
    for (const r of asOther) {
      expect(r.status).toBe(404);
      expect(json(r).code).toBe('not_found');
    }
    // Nothing the other principal did took effect: still open, one part, and the owner completes it.
    const mine = json(await request(base, { headers: bearer(key) }));
    expect(mine).toMatchObject({ state: 'open', parts: [{ partNumber: 1, sizeBytes: 1000 }] });
    expect((await complete(gw, upload, [{ partNumber: 1, sha256: digest(a) }])).status).toBe(202);
    expect(await waitForState(gw, upload, ['done', 'failed'])).toMatchObject({ state: 'done' });
  });
});

describe('a session past its expiry, before any sweep has marked it', () => {
  // No embedded worker: no sweep ever runs, so only the routes' own judgement of expiry is tested.
  let gw: GatewayProcess;
  beforeAll(async () => {
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
  });
  afterAll(async () => {
    expect(await gw.stop()).toBe(0);
  });

  const sessionUrl = (upload: string) => `${gw.url}/api/v1/repositories/mp/uploads/${upload}`;

  it('reads as expired to every route: GET expired with no parts, a part, its completion and its abort 410 upload_expired', async () => {
    const a = randomContent(1000);
    const upload = await openSession(gw, 'lapsed.bin');
    expect((await putPart(gw, upload, 1, a)).status).toBe(200);
    await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, [
      upload,
    ]);
    const got = await request(sessionUrl(upload), { headers: bearer(key) });
    expect(got.status).toBe(200);
    expect(json(got)).toMatchObject({ state: 'expired', parts: [] });
    const part = await putPart(gw, upload, 2, a);
    expect([part.status, part.body.code]).toEqual([410, 'upload_expired']);
    const completed = await complete(gw, upload, [{ partNumber: 1, sha256: digest(a) }]);
    expect([completed.status, completed.body.code]).toEqual([410, 'upload_expired']);
    const aborted = await request(sessionUrl(upload), { method: 'DELETE', headers: bearer(key) });
    expect([aborted.status, json(aborted).code]).toEqual([410, 'upload_expired']);
    // Judged, not swept: the row is still open (the sweep marks it and removes its part).
    const row = await db.pool.query('SELECT state FROM arkvory_upload_sessions WHERE id = $1', [upload]);
    expect(row.rows[0].state).toBe('open');
    expect(
      (await request(`${gw.url}/api/v1/repositories/mp/artifacts/lapsed.bin/content`, { headers: bearer(key) })).status,
    ).toBe(404);
  });

  it('a session the sweep has marked expired is refused its abort the same way, 410 upload_expired', async () => {
    const upload = await openSession(gw, 'swept.bin');
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'expired', finished_at = now() WHERE id = $1`, [
      upload,
    ]);
    const aborted = await request(sessionUrl(upload), { method: 'DELETE', headers: bearer(key) });
    expect([aborted.status, json(aborted).code]).toEqual([410, 'upload_expired']);
    expect(json(await request(sessionUrl(upload), { headers: bearer(key) })).state).toBe('expired');
  });
});
describe('finished sessions', () => {
  /** How long a finished session is kept (docs/multipart-and-maintenance.md). */
  const FINISHED_SESSION_KEEP_DAYS = 7;
  it(`are deleted ${FINISHED_SESSION_KEEP_DAYS} days after they finished, with their parts' rows and job; younger and open ones stay`, async () => {
    let gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const a = randomContent(1000);
    const done = await uploadInParts(gw, 'pruned.bin', [a]);
    expect((await waitForState(gw, done, ['done', 'failed'])).state).toBe('done');
    // Other bytes under the same name: the job fails (conflict) and its parts are removed.
    const failed = await uploadInParts(gw, 'pruned.bin', [randomContent(1000)]);
    expect((await waitForState(gw, failed, ['done', 'failed'])).state).toBe('failed');
    const abort = async (upload: string) =>
      expect(
        (
          await request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, {
            method: 'DELETE',
            headers: bearer(key),
          })
        ).status,
      ).toBe(204);
    const aborted = await openSession(gw, 'pruned-aborted.bin');
    await abort(aborted);
    const recent = await openSession(gw, 'kept-aborted.bin');
    await abort(recent);
    const open = await openSession(gw, 'kept-open.bin');
    expect((await putPart(gw, open, 1, a)).status).toBe(200);
    expect(await gw.stop()).toBe(0);
    // A part row whose removal did not happen (the store or the database failed then) goes too.
    await db.pool.query(
      `INSERT INTO arkvory_upload_parts (session_id, part_number, size_bytes, sha256, file_name) VALUES ($1, 1, 1000, $2, 'left.part')`,
      [failed, '0'.repeat(64)],
    );

    const old = [done, failed, aborted];
    const finishedDaysAgo = (ids: string[], days: number) =>
      db.pool.query(
        'UPDATE arkvory_upload_sessions SET finished_at = now() - make_interval(days => $2) WHERE id = ANY($1)',
        [ids, days],
      );
    await finishedDaysAgo(old, FINISHED_SESSION_KEEP_DAYS + 1);
    await finishedDaysAgo([recent], FINISHED_SESSION_KEEP_DAYS - 1);
    // However old, an open session is not finished.
    await db.pool.query(`UPDATE arkvory_upload_sessions SET created_at = now() - interval '30 days' WHERE id = $1`, [
      open,
    ]);
    const count = async (table: string, ids: string[]) =>
      (
        await db.pool.query(
          `SELECT count(*)::int AS n FROM ${table} WHERE ${table === 'arkvory_upload_sessions' ? 'id' : 'session_id'} = ANY($1)`,
          [ids],
        )
      ).rows[0].n as number;
    expect(await count('arkvory_upload_jobs', old)).toBe(2);
    expect(await count('arkvory_upload_parts', old)).toBe(1);

    // The worker sweeps as soon as it is active, then every 30 s.
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    await waitUntil(async () => (await count('arkvory_upload_sessions', old)) === 0, {
      what: 'the sessions finished 8 days ago deleted',
      timeoutMs: 15_000,
    });
    expect(await count('arkvory_upload_jobs', old)).toBe(0);
    expect(await count('arkvory_upload_parts', old)).toBe(0);
    // The sweep logs after its delete commits, and the line crosses a pipe: the rows can be gone first.
    const prunedLine = () => gw.logLines().find((l) => String(l.msg).startsWith('upload sessions finished'));
    await waitUntil(() => prunedLine() !== undefined, { what: 'the sweep logged what it deleted', timeoutMs: 5_000 });
    expect(prunedLine()).toMatchObject({
      pruned: 3,
      keepDays: FINISHED_SESSION_KEEP_DAYS,
    });
    const get = async (upload: string) =>
      request(`${gw.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) });
    expect(json(await get(recent))).toMatchObject({ state: 'aborted' });
    expect(json(await get(open))).toMatchObject({ state: 'open', parts: [{ partNumber: 1 }] });
    expect((await get(done)).status).toBe(404);
    // What the pruned sessions published stays.
    expect(
      (await request(`${gw.url}/api/v1/repositories/mp/artifacts/pruned.bin/content`, { headers: bearer(key) })).body,
    ).toEqual(a);
    expect(await gw.stop()).toBe(0);
  }, 60_000);
});

describe('parts left behind by a finished session', () => {
  it('are removed by the worker: a worker killed between recording the outcome and removing them, an abort whose removal failed', async () => {
    let gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const failed = await openSession(gw, 'left-failed.bin');
    const aborted = await openSession(gw, 'left-aborted.bin');
    const open = await openSession(gw, 'left-open.bin');
    for (const upload of [failed, aborted, open])
      for (const n of [1, 2]) expect((await putPart(gw, upload, n, randomContent(1000))).status).toBe(200);
    expect(await gw.stop()).toBe(0);
    // What such a crash or failure leaves: the session finished, its part rows and files still there.
    await db.pool.query(
      `UPDATE arkvory_upload_sessions SET state = CASE WHEN id = $1 THEN 'failed' ELSE 'aborted' END, finished_at = now()
        WHERE id IN ($1, $2)`,
      [failed, aborted],
    );
    const files = (upload: string) => readdir(path.join(gw.dataDir, 'uploads', upload)).catch(() => []);
    const rows = async (upload: string) =>
      (await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = $1', [upload]))
        .rows[0].n as number;
    expect(await files(failed)).toHaveLength(2);

    // The worker sweeps as soon as it is active, then every 30 s.
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, dataDir: gw.dataDir });
    // Files first, then rows: both are waited for, as the sweep removes them in two steps.
    await waitUntil(
      async () =>
        (await files(failed)).length + (await files(aborted)).length + (await rows(failed)) + (await rows(aborted)) ===
        0,
      { what: 'the finished sessions’ part files and rows removed', timeoutMs: 15_000 },
    );
    expect([await rows(failed), await rows(aborted)]).toEqual([0, 0]);
    // An open session keeps its parts; the finished ones keep their state.
    expect(await rows(open)).toBe(2);
    expect(await files(open)).toHaveLength(2);
    expect((await waitForState(gw, failed, ['failed'])).parts).toEqual([]);
    expect((await waitForState(gw, aborted, ['aborted'])).parts).toEqual([]);
    expect(await gw.stop()).toBe(0);
  }, 60_000);
});

describe('a separate completion worker', () => {
  it('kill -9 of the worker mid-assembly: a restarted worker completes the job', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' };
    const writer = await startGateway({ env });
    const workerEnv = { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' };
    let worker = await startGateway({ env: workerEnv, dataDir: writer.dataDir });
    const file = randomContent(60 * MiB);
    const parts = [file.subarray(0, 20 * MiB), file.subarray(20 * MiB, 40 * MiB), file.subarray(40 * MiB)];
    const upload = await uploadInParts(writer, 'killed.bin', parts);
    // Freeze the worker the moment it has claimed the job, then kill it.
    let state = '';
    for (let i = 0; i < 2000 && state !== 'running' && state !== 'done'; i++) {
      state =
        (await db.pool.query('SELECT state FROM arkvory_upload_jobs WHERE session_id = $1', [upload])).rows[0]?.state ??
        '';
      if (state !== 'running') await sleep(5);
    }
    expect(state).toBe('running');
    worker.child.kill('SIGSTOP');
    worker.child.kill('SIGKILL');
    await worker.exited;
    expect(
      (await db.pool.query('SELECT count(*)::int AS n FROM arkvory_artifacts WHERE name = $1', ['killed.bin'])).rows[0]
        .n,
    ).toBe(0);
    worker = await startGateway({ env: workerEnv, dataDir: writer.dataDir });
    const done = await waitForState(writer, upload, ['done', 'failed']);
    expect(done.state).toBe('done');
    const job = (await db.pool.query('SELECT attempts FROM arkvory_upload_jobs WHERE session_id = $1', [upload]))
      .rows[0];
    expect(job.attempts).toBe(2);
    const got = await request(`${writer.url}/api/v1/repositories/mp/artifacts/killed.bin/content`, {
      headers: bearer(key),
    });
    expect(sha256(got.body)).toBe(sha256(file));
  }, 120_000);

  it('two workers: one completes, the other stays standby and takes over when the first stops', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' };
    const writer = await startGateway({ env });
    const workerEnv = { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' };
    const first = await startGateway({ env: workerEnv, dataDir: writer.dataDir });
    await waitForLog(first, 'worker.active');
    const second = await startGateway({ env: workerEnv, dataDir: writer.dataDir });
    await waitForLog(second, 'worker.standby');
    const one = await uploadInParts(writer, 'first.bin', [randomContent(3000), randomContent(5000)]);
    expect((await waitForState(writer, one, ['done', 'failed'])).state).toBe('done');
    // The worker logs after it commits the state the writer reports, so wait for the line.
    await waitForLog(first, 'upload.completed');
    expect(second.logs()).not.toContain('upload.completed');
    expect(second.logLines().filter((l) => l.event === 'worker.standby')).toHaveLength(1);
    expect(await first.stop('SIGTERM')).toBe(0);
    const stoppedAt = Date.now();
    await waitForLog(second, 'worker.active', 15_000);
    // Spec: the standby "tries to take the lock every 5 seconds": it took over on one of its 5 s
    // attempts (counted from its standby line), the first one after the active worker stopped.
    const at = (event: string) => Date.parse(String(second.logLines().find((l) => l.event === event)!.time));
    const sinceStandby = at('worker.active') - at('worker.standby');
    const attempts = Math.round(sinceStandby / 5000);
    expect(attempts).toBeGreaterThanOrEqual(1);
    expect(Math.abs(sinceStandby - attempts * 5000)).toBeLessThan(750);
    expect(at('worker.active') - stoppedAt).toBeLessThan(5750);
    const two = await uploadInParts(writer, 'second.bin', [randomContent(4000)]);
    expect((await waitForState(writer, two, ['done', 'failed'])).state).toBe('done');
    await waitForLog(second, 'upload.completed');
  }, 120_000);

  it('a worker process whose lease connection dies (the maintenance barrier with it) stops completing jobs', async () => {
    const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
    const worker = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' },
      dataDir: writer.dataDir,
    });
    await waitForLog(worker, 'worker.active');
    // Its shared maintenance barrier goes with the connection: offline gc could start now.
    await db.pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'arkvory-worker-lease' AND datname = current_database()`,
    );
    await sleep(1000);
    const upload = await uploadInParts(writer, 'fenced.bin', [randomContent(2000)]);
    await sleep(1500);
    const session = json(
      await request(`${writer.url}/api/v1/repositories/mp/uploads/${upload}`, { headers: bearer(key) }),
    );
    expect(session.state).toBe('completing');
    expect(worker.logs()).not.toContain('upload.completed');
    expect(worker.logs()).toContain('worker.fenced');
  }, 120_000);
});

async function waitForLog(gw: GatewayProcess, text: string, timeoutMs = 15_000): Promise<void> {
  await waitUntil(() => gw.logs().includes(text), { what: `"${text}" in the log`, timeoutMs, process: gw });
}
