/**
 * A multipart completion accepted before its principal was disabled (also when enabled again since),
 * or its write grant lowered or removed, publishes nothing: the worker asks again before it publishes (completion-authority.ts).
 * Real processes: a writer that queues the completions, then a separate worker started after the
 * changes, as one that was stalled (or waited out a store failure) would run them. Before, the
 * worker published every one of them.
 */
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { openUploadWithParts } from '../../test/support/multipart-upload.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');

it('a completion whose principal was disabled (even if enabled again) or lost write meanwhile fails, nothing published, its parts and hold gone', async () => {
  const repository = 'revoked-completion';
  await createRepository(db.pool, repository);
  // A quota, so each session holds a reservation for its parts.
  await db.pool.query(
    `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', $1, $2)`,
    [repository, 1e9],
  );
  const admin = new AdminStore(db.pool);
  const account = () => createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
  const cases = [
    { name: 'disabled', who: await account(), state: 'failed', code: 'unauthorized' },
    // Disabled and enabled again before the worker runs: enabling restores the keys, not the session.
    { name: 'reenabled', who: await account(), state: 'failed', code: 'unauthorized' },
    { name: 'lowered', who: await account(), state: 'failed', code: 'forbidden' },
    { name: 'removed', who: await account(), state: 'failed', code: 'forbidden' },
    // A session records its principal, not its key: the principal still writes there.
    { name: 'key-revoked', who: await account(), state: 'done', code: null },
    { name: 'kept', who: await account(), state: 'done', code: null },
  ];
  const writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_EMBEDDED_WORKER: '0' } });
  const repoUrl = `${writer.url}/api/v1/repositories/${repository}`;
  const parts = [Buffer.alloc(3000, 1), Buffer.alloc(2000, 2)];
  const uploads = new Map<string, string>();
  for (const c of cases) {
    const upload = await openUploadWithParts(repoUrl, `${c.name}.bin`, c.who.key, parts);
    const done = await request(`${repoUrl}/uploads/${upload}/complete`, {
      method: 'POST',
      headers: { ...bearer(c.who.key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: digest(p) })) })),
    });
    expect(done.status, done.body.toString()).toBe(202);
    uploads.set(c.name, upload);
  }
  const ids = [...uploads.values()];
  const held = await db.pool.query('SELECT id FROM arkvory_quota_reservations WHERE id = ANY($1::uuid[])', [ids]);
  expect(held.rowCount).toBe(cases.length);

  const who = (name: string) => cases.find((c) => c.name === name)!.who;
  await admin.setPrincipalDisabled(who('disabled').principalId, true);
  await admin.setPrincipalDisabled(who('reenabled').principalId, true);
  await admin.setPrincipalDisabled(who('reenabled').principalId, false);
  await admin.addGrant(who('lowered').principalId, repository, 'read');
  await admin.removeGrant(who('removed').principalId, repository);
  await admin.revokeKey(who('key-revoked').keyId);

  const worker = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' },
    dataDir: writer.dataDir,
  });
  const sessionsNow = async () =>
    (
      await db.pool.query<{ id: string; state: string; error: string | null }>(
        'SELECT id, state, error FROM arkvory_upload_sessions WHERE id = ANY($1::uuid[])',
        [ids],
      )
    ).rows;
  await waitUntil(async () => (await sessionsNow()).every((s) => s.state !== 'completing'), {
    what: 'every completion to end',
    timeoutMs: 10_000,
  });
  const byId = new Map((await sessionsNow()).map((s) => [s.id, s]));
  const lines = worker.logLines();
  for (const c of cases) {
    const s = byId.get(uploads.get(c.name)!)!;
    expect(s.state, c.name).toBe(c.state);
    const published = await db.pool.query('SELECT 1 FROM arkvory_artifacts WHERE repository = $1 AND name = $2', [
      repository,
      `${c.name}.bin`,
    ]);
    expect(published.rowCount, c.name).toBe(c.state === 'done' ? 1 : 0);
    if (c.code) {
      expect(s.error, c.name).toMatch(new RegExp(`^${c.code}: .*nothing was published`));
      // Logged as every failed completion is, once.
      expect(
        lines.filter((l) => l.event === 'upload.failed' && l.code === c.code),
        c.name,
      ).toHaveLength(cases.filter((other) => other.code === c.code).length);
    }
  }
  // Every session's hold ended (once: the rows are gone) and its parts with it, rows and files.
  expect(
    (await db.pool.query('SELECT 1 FROM arkvory_quota_reservations WHERE id = ANY($1::uuid[])', [ids])).rowCount,
  ).toBe(0);
  await waitUntil(
    async () =>
      (await db.pool.query('SELECT 1 FROM arkvory_upload_parts WHERE session_id = ANY($1::uuid[])', [ids])).rowCount ===
      0,
    { what: 'the parts rows to be removed', timeoutMs: 5000 },
  );
  const left = await readdir(path.join(writer.dataDir, 'uploads'), { recursive: true }).catch(() => []);
  expect(left.filter((f) => ids.some((id) => f.startsWith(id)))).toEqual([]);
  // Only what was published is on the store: the two published uploads are the same bytes, one blob.
  const blobs = await readdir(path.join(writer.dataDir, 'blobs'), { recursive: true, withFileTypes: true });
  expect(blobs.filter((e) => e.isFile()).length).toBe(1);
  expect(await worker.stop()).toBe(0);
  expect(await writer.stop()).toBe(0);
});
