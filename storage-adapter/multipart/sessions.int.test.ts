/**
 * Upload sessions against a real PostgreSQL and the directory part store: a part still streaming
 * when its session is aborted or expires gets the session's documented error, never a 500.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import { Readable } from 'node:stream';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createRepository } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { openFsStore } from '../fs/index.ts';
import type { PartStore } from '../store.ts';
import { UploadSessions } from './sessions.ts';
import { toHttpError } from '../../proxy/server/http-errors.ts';

const db = useTestDatabase();
let root: string;
beforeAll(async () => {
  await createRepository(db.pool, 'ss');
  root = await mkdtemp(path.join(os.tmpdir(), 'arkvory-sessions-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

const scope = { repository: 'ss', principalId: null };
const limits = {
  maxUploadBytes: 1e9,
  maxSessionsPerPrincipal: 100,
  maxPendingBytesPerPrincipal: 1e9,
  maxPartsPerPrincipal: 1e9,
};

/** Sends part 1 in two halves, and runs `meanwhile` between them; resolves with the outcome. */
async function partAcross(sessions: UploadSessions, name: string, meanwhile: (id: string) => Promise<void>) {
  const s = await sessions.create(
    { repository: 'ss', kind: 'artifact', name, version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const body = (async function* () {
    yield Buffer.from('abc');
    await gate;
    yield Buffer.from('def');
  })();
  const put = sessions.putPart(scope, s.id, 1, body, { maxBytes: 1e6 }).then(
    () => undefined,
    (err: unknown) => err,
  );
  await sleep(100);
  await meanwhile(s.id);
  release();
  const err = await put;
  const rows = (
    await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = $1', [s.id])
  ).rows[0].n;
  return { id: s.id, err, rows };
}

const abort = (sessions: UploadSessions) => (id: string) => sessions.abort(scope, id);
const expire = (sessions: UploadSessions) => async (id: string) => {
  await db.pool.query('UPDATE arkvory_upload_sessions SET expires_at = now() WHERE id = $1', [id]);
  await sessions.expire();
};

/** A part racing its session's abort gets 409 `conflict`, its expiry 410 `upload_expired`; neither is recorded. */
async function expectEndedSessionRefusesParts(sessions: UploadSessions, name: string): Promise<void> {
  const aborted = await partAcross(sessions, `${name}-abort`, abort(sessions));
  expect(toHttpError(aborted.err)).toMatchObject({ status: 409, code: 'conflict' });
  expect(aborted.rows).toBe(0);
  const expired = await partAcross(sessions, `${name}-expire`, expire(sessions));
  expect(toHttpError(expired.err)).toMatchObject({ status: 410, code: 'upload_expired' });
  expect(expired.rows).toBe(0);
}

it('a part streaming to disk when its session is aborted gets 409 conflict, when it expires 410 upload_expired', async () => {
  const { parts } = await openFsStore({ root, role: 'writer', pool: db.pool });
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  await expectEndedSessionRefusesParts(sessions, 'fs');
});

it('a part whose write outlived its session is not recorded, and its file is removed', async () => {
  // A store whose write survives the abort (the static-HTTP and S3 stores, or a directory created again).
  const files = new Set<string>();
  const parts: PartStore = {
    async write(sessionId, fileName, body) {
      for await (const _ of body);
      files.add(`${sessionId}/${fileName}`);
    },
    read: async function* () {},
    has: async (sessionId, fileName) => files.has(`${sessionId}/${fileName}`),
    async remove(sessionId, fileName) {
      files.delete(`${sessionId}/${fileName}`);
    },
    async removeSession(sessionId) {
      for (const f of files) if (f.startsWith(`${sessionId}/`)) files.delete(f);
    },
  };
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  await expectEndedSessionRefusesParts(sessions, 'mem');
  expect(files.size).toBe(0);
});

it('a part whose session ended before its directory was made leaves no directory behind', async () => {
  const fs = (await openFsStore({ root, role: 'writer', pool: db.pool })).parts;
  // The directory store makes the session's directory when the part's write begins: held here
  // until the session has ended (an abort or expiry between the part's open check and its write).
  const parts: PartStore = {
    ...fs,
    async write(sessionId, fileName, body, signal) {
      await writeGate;
      return fs.write(sessionId, fileName, body, signal);
    },
  };
  let release!: () => void;
  const writeGate = new Promise<void>((r) => {
    release = r;
  });
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  const ended = await partAcross(sessions, 'fs-late-dir', async (id) => {
    await sessions.abort(scope, id);
    release();
  });
  expect(toHttpError(ended.err)).toMatchObject({ status: 409, code: 'conflict' });
  expect(ended.rows).toBe(0);
  expect(await readdir(path.join(root, 'uploads')).catch(() => [])).not.toContain(ended.id);
});

it('an abort or expiry whose part removal fails still ends the session; the sweep removes the parts later', async () => {
  const fs = (await openFsStore({ root, role: 'writer', pool: db.pool })).parts;
  // What a part written into the folder while it is removed makes `rm -r` throw.
  let failures = 0;
  const parts: PartStore = {
    ...fs,
    async removeSession(sessionId) {
      if (failures > 0) {
        failures--;
        throw Object.assign(new Error(`ENOTEMPTY: directory not empty, rmdir 'uploads/${sessionId}'`), {
          code: 'ENOTEMPTY',
        });
      }
      return fs.removeSession(sessionId);
    },
  };
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  const open = async (name: string) => {
    const s = await sessions.create(
      { repository: 'ss', kind: 'artifact', name, version: '', asset: '' },
      { contentType: 'application/octet-stream', principalId: null },
    );
    await sessions.putPart(scope, s.id, 1, Readable.from([Buffer.from('abc')]), { maxBytes: 1e6 });
    return s.id;
  };
  const rows = async (id: string) =>
    (await db.pool.query('SELECT count(*)::int AS n FROM arkvory_upload_parts WHERE session_id = $1', [id])).rows[0]
      .n as number;
  const folder = (id: string) => readdir(path.join(root, 'uploads', id)).catch(() => 'gone');

  const aborted = await open('abort-fails');
  failures = 1;
  await sessions.abort(scope, aborted);
  expect((await sessions.get(scope, aborted)).state).toBe('aborted');
  const expired = await open('expiry-fails');
  await db.pool.query('UPDATE arkvory_upload_sessions SET expires_at = now() WHERE id = $1', [expired]);
  failures = 1;
  await sessions.expire();
  expect((await sessions.get(scope, expired)).state).toBe('expired');
  // Their rows stay until their files are gone: they name the sessions to the sweep.
  expect([await rows(aborted), await rows(expired)]).toEqual([1, 1]);
  expect(await sessions.removeLeftParts(() => {})).toBeGreaterThanOrEqual(2);
  expect([await rows(aborted), await rows(expired)]).toEqual([0, 0]);
  expect([await folder(aborted), await folder(expired)]).toEqual(['gone', 'gone']);
});

it('a part whose quota reservation left out the part it replaces is refused if that part shrank meanwhile', async () => {
  const { parts } = await openFsStore({ root, role: 'writer', pool: db.pool });
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  const s = await sessions.create(
    { repository: 'ss', kind: 'artifact', name: 'replaced-part', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  const send = (bytes: number, replacedBytes?: number) =>
    sessions.putPart(scope, s.id, 1, Readable.from([Buffer.alloc(bytes, bytes % 251)]), {
      maxBytes: 1e6,
      ...(replacedBytes === undefined ? {} : { replacedBytes }),
    });
  await send(600);
  expect(await sessions.replaceablePartSize(scope, s.id, 1)).toBe(600);
  // Began when part 1 held 600 bytes (its reservation counted 600 fewer); another send made it 100.
  await send(100);
  await expect(send(600, 600)).rejects.toMatchObject({ code: 'conflict' });
  expect((await sessions.get(scope, s.id)).parts).toMatchObject([{ partNumber: 1, sizeBytes: 100 }]);
  expect(await readdir(path.join(root, 'uploads', s.id))).toHaveLength(1);
  // What it assumed is still there: recorded.
  expect(await send(700, 100)).toMatchObject({ sizeBytes: 700 });
  await expect(
    sessions.replaceablePartSize({ ...scope, principalId: '00000000-0000-4000-8000-000000000000' }, s.id, 1),
  ).rejects.toMatchObject({ code: 'not_found' });
});

it('a part that replaces another is recorded and answered even when the old file cannot be removed', async () => {
  const fs = (await openFsStore({ root, role: 'writer', pool: db.pool })).parts;
  // A store hiccup (the static-HTTP or S3 store unreachable for a moment) as the old file is removed.
  let failures = 0;
  const parts: PartStore = {
    ...fs,
    async remove(sessionId, fileName) {
      if (failures > 0) {
        failures--;
        throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' });
      }
      return fs.remove(sessionId, fileName);
    },
  };
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  const s = await sessions.create(
    { repository: 'ss', kind: 'artifact', name: 'replaced-removal-fails', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  const send = (bytes: number) =>
    sessions.putPart(scope, s.id, 1, Readable.from([Buffer.alloc(bytes, 7)]), { maxBytes: 1e6 });
  await send(300);
  failures = 1;
  // Recorded: a 5xx now would tell the client its part was lost when it is the one kept.
  expect(await send(500)).toMatchObject({ partNumber: 1, sizeBytes: 500 });
  expect(failures).toBe(0);
  expect((await sessions.get(scope, s.id)).parts).toMatchObject([{ partNumber: 1, sizeBytes: 500 }]);
  // The old file is left beside it, named by no row, until the session's own removal takes both.
  expect(await readdir(path.join(root, 'uploads', s.id))).toHaveLength(2);
  await sessions.abort(scope, s.id);
  await expect(readdir(path.join(root, 'uploads', s.id))).rejects.toMatchObject({ code: 'ENOENT' });
});

it('a part whose COMMIT went through but whose answer was lost keeps its file: the row names it', async () => {
  const { parts } = await openFsStore({ root, role: 'writer', pool: db.pool });
  // The connection lost as PostgreSQL answered the COMMIT: committed, yet the caller sees an error.
  let loseCommitAnswer = false;
  const pool = new Proxy(db.pool, {
    get(target, name, receiver) {
      if (name !== 'connect') return Reflect.get(target, name, receiver);
      // pool.query connects with a callback: left alone (only transactions check clients out).
      return async (...callback: unknown[]) => {
        if (callback.length > 0) return (target.connect as (...a: unknown[]) => unknown).apply(target, callback);
        const client = await target.connect();
        return new Proxy(client, {
          get(c, key, r) {
            if (key !== 'query') return Reflect.get(c, key, r);
            return async (...args: Parameters<typeof client.query>) => {
              const result = await (c.query as (...a: unknown[]) => Promise<unknown>).apply(c, args);
              if (loseCommitAnswer && args[0] === 'COMMIT') {
                loseCommitAnswer = false;
                throw Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' });
              }
              return result;
            };
          },
        });
      };
    },
  });
  const sessions = new UploadSessions({ pool, parts, ttlSeconds: 3600, limits });
  const s = await sessions.create(
    { repository: 'ss', kind: 'artifact', name: 'lost-commit-answer', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  loseCommitAnswer = true;
  await expect(
    sessions.putPart(scope, s.id, 1, Readable.from([Buffer.alloc(400, 3)]), { maxBytes: 1e6 }),
  ).rejects.toThrow('Connection terminated unexpectedly');
  expect(loseCommitAnswer).toBe(false);
  // Recorded after all: a completion lists it, so its file must be there to be read.
  expect((await sessions.get(scope, s.id)).parts).toMatchObject([{ partNumber: 1, sizeBytes: 400 }]);
  const named = await db.pool.query<{ file_name: string }>(
    'SELECT file_name FROM arkvory_upload_parts WHERE session_id = $1',
    [s.id],
  );
  expect(await parts.has(s.id, named.rows[0]!.file_name)).toBe(true);
});

it('the bound on open sessions counts every session holding its parts past its expiry: a stalled completion or sweep opens no room', async () => {
  const { parts } = await openFsStore({ root, role: 'writer', pool: db.pool });
  const sessions = new UploadSessions({
    pool: db.pool,
    parts,
    ttlSeconds: 3600,
    limits: { ...limits, maxSessionsPerPrincipal: 2 },
  });
  const principalId = randomUUID();
  const open = (name: string) =>
    sessions.create(
      { repository: 'ss', kind: 'artifact', name, version: '', asset: '' },
      { contentType: 'application/octet-stream', principalId },
    );
  const own = { repository: 'ss', principalId };
  const completing = await open('bound-completing');
  const body = Buffer.from('one part');
  await sessions.putPart(own, completing.id, 1, Readable.from([body]), { maxBytes: 1e6 });
  await sessions.complete(own, completing.id, [
    { partNumber: 1, sha256: createHash('sha256').update(body).digest('hex') },
  ]);
  const lapsed = await open('bound-lapsed');
  await sessions.putPart(own, lapsed.id, 1, Readable.from([body]), { maxBytes: 1e6 });
  // No worker runs: the completion waits (a stalled worker, a store failure waited out) past the
  // session's expiry, its parts and job kept; the open one has expired, its part not yet swept.
  await db.pool.query(`UPDATE arkvory_upload_sessions SET expires_at = now() WHERE id = ANY($1)`, [
    [completing.id, lapsed.id],
  ]);
  expect((await sessions.get(own, completing.id)).state).toBe('completing');
  expect((await sessions.get(own, lapsed.id)).state).toBe('expired');
  await expect(open('bound-refused')).rejects.toMatchObject({ code: 'too_many_uploads' });
  // The sweep ends the expired one and removes its part: its place is free; the completing one's is not.
  await sessions.expire();
  await open('bound-second');
  await expect(open('bound-third')).rejects.toMatchObject({ code: 'too_many_uploads' });
});

it('a finished session whose parts could not be removed is kept past its retention until they are', async () => {
  const fs = (await openFsStore({ root, role: 'writer', pool: db.pool })).parts;
  // A store that refuses to remove this session's parts for longer than the retention (a bucket
  // policy denying deletes, a folder made read-only): the rows are what name its files to the sweep.
  let refusing = true;
  const parts: PartStore = {
    ...fs,
    async removeSession(sessionId) {
      if (refusing) throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      return fs.removeSession(sessionId);
    },
  };
  const sessions = new UploadSessions({ pool: db.pool, parts, ttlSeconds: 3600, limits });
  const s = await sessions.create(
    { repository: 'ss', kind: 'artifact', name: 'removal-refused', version: '', asset: '' },
    { contentType: 'application/octet-stream', principalId: null },
  );
  await sessions.putPart(scope, s.id, 1, Readable.from([Buffer.from('abc')]), { maxBytes: 1e6 });
  await sessions.abort(scope, s.id);
  expect(await sessions.removeLeftParts(() => {})).toBe(0);
  await db.pool.query(`UPDATE arkvory_upload_sessions SET finished_at = now() - interval '30 days' WHERE id = $1`, [
    s.id,
  ]);
  const left = async () =>
    (
      await db.pool.query(
        `SELECT (SELECT count(*)::int FROM arkvory_upload_sessions WHERE id = $1) AS sessions,
                (SELECT count(*)::int FROM arkvory_upload_parts WHERE session_id = $1) AS parts`,
        [s.id],
      )
    ).rows[0] as { sessions: number; parts: number };
  // Deleted with its part rows, its file would be named by nothing but offline gc.
  await sessions.prune();
  expect(await left()).toEqual({ sessions: 1, parts: 1 });
  expect(await readdir(path.join(root, 'uploads', s.id))).toHaveLength(1);
  refusing = false;
  expect(await sessions.removeLeftParts(() => {})).toBeGreaterThanOrEqual(1);
  await sessions.prune();
  expect(await left()).toEqual({ sessions: 0, parts: 0 });
  expect(await readdir(path.join(root, 'uploads', s.id)).catch(() => 'gone')).toBe('gone');
});
