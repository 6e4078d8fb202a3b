/**
 * Multipart bounds over real sockets: ARKVORY_MAX_UPLOAD_BYTES bounds the assembled artifact (at
 * each part and at completion), per-principal bounds on open sessions, on stored part bytes and on
 * stored parts, and completion jobs taken in round robin across principals by a real worker process.
 */
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
let keyA: string;
let keyB: string;

beforeAll(async () => {
  await createRepository(db.pool, 'mb');
  ({ key: keyA } = await createServiceAccount(db.pool, { grants: { mb: 'write' } }));
  ({ key: keyB } = await createServiceAccount(db.pool, { grants: { mb: 'write' } }));
});

const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;
const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function open(
  gw: GatewayProcess,
  key: string,
  id: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await request(`${gw.url}/api/v1/repositories/mb/artifacts/${id}/uploads`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from('{}'),
  });
  return { status: r.status, body: json(r) };
}

async function openOk(gw: GatewayProcess, key: string, id: string): Promise<string> {
  const r = await open(gw, key, id);
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.upload as string;
}

async function putPart(gw: GatewayProcess, key: string, upload: string, n: number, data: Buffer) {
  const r = await request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}/parts/${n}`, {
    method: 'PUT',
    headers: bearer(key),
    body: data,
  });
  return { status: r.status, body: json(r) };
}

/**
 * A part sent chunked (no Content-Length): the bound is found while the body streams. With `rest`,
 * the first half goes out at once and the rest when `rest` resolves: the gateway has then checked
 * the part and is writing it, with the bound it found when it began.
 */
function putChunked(gw: GatewayProcess, key: string, upload: string, n: number, data: Buffer, rest?: Promise<void>) {
  return new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
    const req = http.request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}/parts/${n}`, {
      method: 'PUT',
      headers: { ...bearer(key), 'transfer-encoding': 'chunked' },
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString()) }));
    });
    req.on('error', reject);
    const held = rest ? data.length >> 1 : data.length;
    for (let i = 0; i < held; i += 100) req.write(data.subarray(i, Math.min(i + 100, held)));
    if (rest) void rest.then(() => req.end(data.subarray(held)));
    else req.end();
  });
}

/** A part sent with `Expect: 100-continue`: its body goes out only after 100 Continue. */
function putExpecting(gw: GatewayProcess, key: string, upload: string, n: number, data: Buffer) {
  return new Promise<{ status: number; body: Record<string, unknown>; continued: boolean }>((resolve, reject) => {
    let continued = false;
    const req = http.request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}/parts/${n}`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(data.length), expect: '100-continue' },
      agent: false,
    });
    req.on('continue', () => {
      continued = true;
      req.end(data);
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString()), continued }),
      );
    });
    req.on('error', reject);
    req.flushHeaders();
  });
}

async function complete(gw: GatewayProcess, key: string, upload: string, parts: Buffer[]) {
  const r = await request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}/complete`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })) })),
  });
  return { status: r.status, body: json(r) };
}

async function published(gw: GatewayProcess, key: string, id: string): Promise<number> {
  return (await request(`${gw.url}/api/v1/repositories/mb/artifacts/${id}/content`, { headers: bearer(key) })).status;
}

async function state(gw: GatewayProcess, key: string, upload: string): Promise<string> {
  return json(await request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}`, { headers: bearer(key) }))
    .state as string;
}

const bytes = (n: number, fill = 1) => Buffer.alloc(n, fill);

describe('ARKVORY_MAX_UPLOAD_BYTES bounds a multipart upload as a whole', () => {
  it('refuses with 413 upload_too_large the part that takes the parts past the limit; nothing published', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MAX_UPLOAD_BYTES: '1024' } });
    const upload = await openOk(gw, keyA, 'crossing.bin');
    expect((await putPart(gw, keyA, upload, 1, bytes(512))).status).toBe(200);
    expect((await putPart(gw, keyA, upload, 2, bytes(500))).status).toBe(200);
    // Content-Length says it crosses: refused before the body is read.
    const crossing = await putPart(gw, keyA, upload, 3, bytes(100));
    expect(crossing.status).toBe(413);
    expect(crossing.body).toMatchObject({ code: 'upload_too_large' });
    expect(crossing.body.message).toMatch(/1112 bytes.*1024/);
    // No Content-Length: refused once the streamed bytes cross it.
    const streamed = await putChunked(gw, keyA, upload, 3, bytes(300));
    expect(streamed.status).toBe(413);
    expect(streamed.body).toMatchObject({ code: 'upload_too_large' });
    // Re-sending a part replaces it: its old bytes do not count twice.
    expect((await putPart(gw, keyA, upload, 2, bytes(512, 2))).status).toBe(200);
    expect((await putPart(gw, keyA, upload, 3, bytes(1))).status).toBe(413);
    // Asked with Expect: 100-continue, a part past the bound, or for a session not the sender's, is
    // answered before its body is asked for, as a whole upload is.
    const expecting = await putExpecting(gw, keyA, upload, 3, bytes(100));
    expect(expecting).toMatchObject({ status: 413, continued: false, body: { code: 'upload_too_large' } });
    const foreign = await putExpecting(gw, keyB, upload, 3, bytes(1));
    expect(foreign).toMatchObject({ status: 404, continued: false, body: { code: 'not_found' } });
    const fits = await putExpecting(gw, keyA, upload, 2, bytes(512, 3));
    expect(fits).toMatchObject({ status: 200, continued: true, body: { partNumber: 2, sizeBytes: 512 } });
    const parts = await db.pool.query(
      'SELECT part_number, size_bytes::int AS size FROM arkvory_upload_parts WHERE session_id = $1 ORDER BY 1',
      [upload],
    );
    expect(parts.rows).toEqual([
      { part_number: 1, size: 512 },
      { part_number: 2, size: 512 },
    ]);
    // A declared size above the limit is refused when the session is opened.
    const declared = await request(`${gw.url}/api/v1/repositories/mb/artifacts/big.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(keyA), 'content-type': 'application/json' },
      body: Buffer.from('{"size":1025}'),
    });
    expect(declared.status).toBe(413);
    expect(json(declared)).toMatchObject({ code: 'upload_too_large' });
    expect(await published(gw, keyA, 'crossing.bin')).toBe(404);
  });

  it('parts sent in parallel: each began within the limit, and only the one recorded first is kept', async () => {
    const gw = await startGateway({
      // Four parts of one principal at once (the default admits one upload at a time).
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MAX_UPLOAD_BYTES: '1024', ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '4' },
    });
    const upload = await openOk(gw, keyA, 'parallel.bin');
    const partsDir = path.join(gw.dataDir, 'uploads', upload);
    let release!: () => void;
    const rest = new Promise<void>((resolve) => (release = resolve));
    const answers = [1, 2, 3, 4].map((n) => putChunked(gw, keyA, upload, n, bytes(600, n), rest));
    // Each part's file exists once the gateway checked it (nothing stored yet: 1024 allowed) and writes it.
    await waitUntil(async () => (await readdir(partsDir).catch(() => [])).length === 4, {
      what: 'the four parts to be checked and written at once',
    });
    release();
    const statuses = await Promise.all(answers);
    const kept = statuses.filter((a) => a.status === 200);
    expect(kept).toHaveLength(1);
    for (const a of statuses.filter((x) => x.status !== 200))
      expect(a).toMatchObject({ status: 413, body: { code: 'upload_too_large' } });
    const rows = await db.pool.query<{ size: number }>(
      'SELECT size_bytes::int AS size FROM arkvory_upload_parts WHERE session_id = $1',
      [upload],
    );
    expect(rows.rows).toEqual([{ size: 600 }]);
    // The refused parts' files are removed: only the kept one stays.
    expect(await readdir(partsDir)).toHaveLength(1);
    expect(await gw.stop()).toBe(0);
  });

  it('refuses at completion parts stored before the limit was lowered, before any assembly', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const before = await startGateway({ env });
    const parts = [bytes(1000), bytes(1000, 2), bytes(1000, 3)];
    const upload = await openOk(before, keyA, 'lowered.bin');
    for (const [i, p] of parts.entries()) expect((await putPart(before, keyA, upload, i + 1, p)).status).toBe(200);
    await before.stop();
    const after = await startGateway({ env: { ...env, ARKVORY_MAX_UPLOAD_BYTES: '1024' }, dataDir: before.dataDir });
    const done = await complete(after, keyA, upload, parts);
    expect(done.status).toBe(413);
    expect(done.body).toMatchObject({ code: 'upload_too_large' });
    expect(done.body.message).toMatch(/3000 bytes.*1024/);
    expect(await state(after, keyA, upload)).toBe('open');
    const jobs = await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_jobs WHERE session_id = $1', [
      upload,
    ]);
    expect(jobs.rows[0].n).toBe(0);
    expect(await published(after, keyA, 'lowered.bin')).toBe(404);
  });
});

describe('per-principal multipart bounds', () => {
  it('refuses a session past ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL with 429 too_many_uploads, per principal', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL: '3' },
    });
    // Sessions of earlier tests count: abort them first.
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state = 'open'`);
    const ids = [await openOk(gw, keyA, 's1'), await openOk(gw, keyA, 's2'), await openOk(gw, keyA, 's3')];
    const refused = await open(gw, keyA, 's4');
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: 'too_many_uploads' });
    expect(refused.body.message).toMatch(/at most 3/);
    // Another principal has its own bound.
    await openOk(gw, keyB, 'b1');
    // Aborting one frees a place.
    const aborted = await request(`${gw.url}/api/v1/repositories/mb/uploads/${ids[0]}`, {
      method: 'DELETE',
      headers: bearer(keyA),
    });
    expect(aborted.status).toBe(204);
    await openOk(gw, keyA, 's4');
    const count = await db.pool.query(
      `SELECT count(*)::int AS n FROM arkvory_upload_sessions WHERE state = 'open' AND name LIKE 's%'`,
    );
    expect(count.rows[0].n).toBe(3);
  });

  it('refuses a part past ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL with 413 upload_quota_exceeded', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL: '2048' },
    });
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state IN ('open', 'completing')`);
    const first = await openOk(gw, keyA, 'q1');
    const second = await openOk(gw, keyA, 'q2');
    expect((await putPart(gw, keyA, first, 1, bytes(1500))).status).toBe(200);
    const over = await putPart(gw, keyA, second, 1, bytes(600));
    expect(over.status).toBe(413);
    expect(over.body).toMatchObject({ code: 'upload_quota_exceeded' });
    const streamed = await putChunked(gw, keyA, second, 1, bytes(600));
    expect(streamed.status).toBe(413);
    expect(streamed.body).toMatchObject({ code: 'upload_quota_exceeded' });
    // Another principal's bytes are its own.
    const other = await openOk(gw, keyB, 'q3');
    expect((await putPart(gw, keyB, other, 1, bytes(1500))).status).toBe(200);
    // Aborting the first upload frees its bytes.
    await request(`${gw.url}/api/v1/repositories/mb/uploads/${first}`, { method: 'DELETE', headers: bearer(keyA) });
    expect((await putPart(gw, keyA, second, 1, bytes(600))).status).toBe(200);
  });

  it('refuses a part past ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL with 429 too_many_parts before its body, empty parts too', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL: '3' },
    });
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state IN ('open', 'completing')`);
    const first = await openOk(gw, keyA, 'n1');
    const second = await openOk(gw, keyA, 'n2');
    // Empty parts take no bytes but a file each: they count like any other.
    expect((await putPart(gw, keyA, first, 1, bytes(0))).status).toBe(200);
    expect((await putPart(gw, keyA, first, 2, bytes(0))).status).toBe(200);
    expect((await putPart(gw, keyA, second, 1, bytes(1))).status).toBe(200);
    // A fourth part, in either session: refused before 100 Continue, so its body is never sent.
    const expecting = await putExpecting(gw, keyA, second, 2, bytes(10));
    expect(expecting).toMatchObject({ status: 429, continued: false, body: { code: 'too_many_parts' } });
    expect(expecting.body.message).toMatch(/hold 3 parts.*at most 3/);
    expect(await putPart(gw, keyA, first, 3, bytes(0))).toMatchObject({
      status: 429,
      body: { code: 'too_many_parts' },
    });
    expect((await putChunked(gw, keyA, second, 2, bytes(10))).status).toBe(429);
    // A part number sent again replaces its part: not one more.
    expect((await putPart(gw, keyA, first, 2, bytes(5))).status).toBe(200);
    // Another principal holds its own parts.
    const other = await openOk(gw, keyB, 'n3');
    for (const n of [1, 2, 3]) expect((await putPart(gw, keyB, other, n, bytes(0))).status).toBe(200);
    // Nothing of the refused parts is on disk: one file per part held.
    expect((await readdir(path.join(gw.dataDir, 'uploads', first))).length).toBe(2);
    expect((await readdir(path.join(gw.dataDir, 'uploads', second))).length).toBe(1);
    // Aborting the first upload frees its two parts.
    await request(`${gw.url}/api/v1/repositories/mb/uploads/${first}`, { method: 'DELETE', headers: bearer(keyA) });
    expect((await putPart(gw, keyA, second, 2, bytes(10))).status).toBe(200);
    expect((await putPart(gw, keyA, second, 3, bytes(10))).status).toBe(200);
    expect((await putPart(gw, keyA, second, 4, bytes(10))).status).toBe(429);
    expect(await gw.stop()).toBe(0);
  });

  it('parts sent in parallel past ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL: each began within it, one is kept', async () => {
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_MULTIPART_MAX_PARTS_PER_PRINCIPAL: '2',
        ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '4',
      },
    });
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state IN ('open', 'completing')`);
    const upload = await openOk(gw, keyA, 'np.bin');
    const partsDir = path.join(gw.dataDir, 'uploads', upload);
    expect((await putPart(gw, keyA, upload, 1, bytes(10))).status).toBe(200);
    let release!: () => void;
    const rest = new Promise<void>((resolve) => (release = resolve));
    const answers = [2, 3, 4].map((n) => putChunked(gw, keyA, upload, n, bytes(600, n), rest));
    // Each new part's file exists once the gateway checked it (one part held: 2 allowed) and writes it.
    await waitUntil(async () => (await readdir(partsDir).catch(() => [])).length === 4, {
      what: 'the three parts to be checked and written at once',
    });
    release();
    const statuses = await Promise.all(answers);
    expect(statuses.filter((a) => a.status === 200)).toHaveLength(1);
    for (const a of statuses.filter((x) => x.status !== 200))
      expect(a).toMatchObject({ status: 429, body: { code: 'too_many_parts' } });
    const rows = await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = $1', [
      upload,
    ]);
    expect(rows.rows[0].n).toBe(2);
    expect(await readdir(partsDir)).toHaveLength(2);
    expect(await gw.stop()).toBe(0);
  });

  it('a session whose completion fails has its part files removed: its bytes stop counting, so they leave the disk too', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_MULTIPART_MAX_PENDING_BYTES_PER_PRINCIPAL: '2048' },
    });
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state IN ('open', 'completing')`);
    const uploads: string[] = [];
    // Each round stores the whole pending bound and completes against a sha256 the bytes do not have.
    for (let round = 0; round < 3; round++) {
      const r = await request(`${gw.url}/api/v1/repositories/mb/artifacts/failing-${round}.bin/uploads`, {
        method: 'POST',
        headers: { ...bearer(keyA), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ sha256: '0'.repeat(64) })),
      });
      expect(r.status).toBe(201);
      const upload = json(r).upload as string;
      uploads.push(upload);
      const part = bytes(2000, round + 1);
      expect((await putPart(gw, keyA, upload, 1, part)).status).toBe(200);
      expect((await complete(gw, keyA, upload, [part])).status).toBe(202);
      await waitUntil(async () => (await state(gw, keyA, upload)) === 'failed', { timeoutMs: 30_000 });
    }
    expect(await published(gw, keyA, 'failing-0.bin')).toBe(404);
    for (const upload of uploads) {
      expect(await readdir(path.join(gw.dataDir, 'uploads', upload)).catch(() => 'gone')).toBe('gone');
      const session = json(
        await request(`${gw.url}/api/v1/repositories/mb/uploads/${upload}`, { headers: bearer(keyA) }),
      );
      expect(session.error).toMatch(/^[a-z_]+: /);
    }
    const rows = await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = ANY($1)', [
      uploads,
    ]);
    expect(rows.rows[0].n).toBe(0);
  });
});

describe('completion jobs in round robin across principals', () => {
  it('with 200 completions of one principal queued, another principal’s completion waits at most one job', async () => {
    const env = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_EMBEDDED_WORKER: '0',
      ARKVORY_MULTIPART_MAX_SESSIONS_PER_PRINCIPAL: '1000',
    };
    const writer = await startGateway({ env });
    await db.pool.query(`UPDATE arkvory_upload_sessions SET state = 'aborted' WHERE state IN ('open', 'completing')`);
    const queueOne = async (key: string, id: string): Promise<string> => {
      const upload = await openOk(writer, key, id);
      const part = Buffer.from(id);
      expect((await putPart(writer, key, upload, 1, part)).status).toBe(200);
      const done = await complete(writer, key, upload, [part]);
      expect(done.status).toBe(202);
      return done.body.job as string;
    };
    let next = 0;
    const aJobs: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < 200) aJobs.push(await queueOne(keyA, `fair-a-${next++}`));
      }),
    );
    const bJob = await queueOne(keyB, 'fair-b');
    expect(aJobs).toHaveLength(200);
    // Every job queued before the worker starts: FIFO would run B's 201st.
    const worker = await startGateway({ env: { ...env, ARKVORY_ROLE: 'worker' }, dataDir: writer.dataDir });
    const deadline = Date.now() + 120_000;
    const completedOrder = () =>
      worker
        .logLines()
        .filter((l) => l.event === 'upload.completed')
        .map((l) => String(l.job));
    while (completedOrder().length < 201) {
      if (Date.now() > deadline) throw new Error(`only ${completedOrder().length} of 201 jobs completed`);
      await sleep(100);
    }
    const order = completedOrder();
    expect(new Set(order)).toEqual(new Set([...aJobs, bJob]));
    expect(order.indexOf(bJob)).toBeLessThanOrEqual(1);
  }, 180_000);
});
