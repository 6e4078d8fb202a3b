/**
 * An upload whose key is revoked, or whose grant is lowered, while its body is on its way publishes
 * nothing: its authorization is asked again before its bytes are published (a real writer, blobs
 * on disk). Before, a body begun before the revocation was published whenever it ended.
 */
import http from 'node:http';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

/** A chunked PUT that has sent `first` and waits for `end()` to send the rest. */
function startPut(url: string, key: string, first: Buffer) {
  let answer: Answer | Error | undefined;
  const req = http.request(url, {
    method: 'PUT',
    headers: { ...bearer(key), 'transfer-encoding': 'chunked', 'content-type': 'application/octet-stream' },
    agent: false,
  });
  req.on('response', (res) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => {
      answer = { status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString() || '{}') };
    });
  });
  req.on('error', (err) => {
    answer ??= err;
  });
  req.write(first);
  return {
    answer: () => answer,
    end: (rest: Buffer) => req.end(rest),
  };
}

async function stagedFiles(dataDir: string): Promise<number> {
  const entries = await readdir(path.join(dataDir, 'tmp'), { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).length;
}

describe('authorization asked again before an upload is published (real writer)', () => {
  it('a key revoked, or a grant lowered to read, while the body is on its way: 401 or 403, nothing published or staged', async () => {
    const repository = 'revoked-mid-upload';
    await createRepository(db.pool, repository);
    const revoked = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const lowered = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const reader = await createServiceAccount(db.pool, { grants: { [repository]: 'read' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const artifact = (name: string) => `${gw.url}/api/v1/repositories/${repository}/artifacts/${name}`;
    const store = new AdminStore(db.pool);
    const body = Buffer.alloc(256 * 1024, 3);

    const cases = [
      {
        name: 'by-revoked-key',
        key: revoked.key,
        change: () => store.revokeKey(revoked.keyId).then(() => {}),
        status: 401,
      },
      {
        name: 'by-lowered-grant',
        key: lowered.key,
        change: () => store.addGrant(lowered.principalId, repository, 'read').then(() => {}),
        status: 403,
      },
    ];
    for (const c of cases) {
      const put = startPut(artifact(c.name), c.key, body.subarray(0, 128 * 1024));
      await waitUntil(async () => put.answer() !== undefined || (await stagedFiles(gw.dataDir)) > 0, {
        what: 'the upload to be staging its body',
        timeoutMs: 10_000,
      });
      expect(put.answer()).toBeUndefined();
      await c.change();
      // Until the gateway refuses a new write of that key there (within 2 s): a DELETE, which takes no
      // upload slot (the upload holds the principal's one), of a name that holds nothing (allowed: 404).
      const probe = `${artifact(c.name)}-probe`;
      await waitUntil(
        async () => (await fetch(probe, { method: 'DELETE', headers: bearer(c.key) })).status === c.status,
        { what: `a new write of ${c.name} to be refused`, timeoutMs: 10_000 },
      );
      put.end(body.subarray(128 * 1024));
      await waitUntil(() => put.answer() !== undefined, { what: `${c.name} to be answered`, timeoutMs: 10_000 });
      expect(put.answer(), c.name).toMatchObject({ status: c.status });
      expect((await fetch(`${artifact(c.name)}/content`, { headers: bearer(reader.key) })).status).toBe(404);
    }
    const rows = await db.pool.query('SELECT name FROM arkvory_artifacts WHERE repository = $1', [repository]);
    expect(rows.rows).toEqual([]);
    expect(await stagedFiles(gw.dataDir)).toBe(0);
    expect(await gw.stop()).toBe(0);
  });

  it('the same bytes as already published, its key revoked while the body is on its way: 401, not 200 unchanged', async () => {
    const repository = 'revoked-same-bytes';
    await createRepository(db.pool, repository);
    const first = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const revoked = await createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const url = `${gw.url}/api/v1/repositories/${repository}/artifacts/same.bin`;
    const body = Buffer.alloc(256 * 1024, 5);
    const put = await fetch(url, { method: 'PUT', headers: bearer(first.key), body });
    expect(put.status).toBe(201);

    const again = startPut(url, revoked.key, body.subarray(0, 128 * 1024));
    await waitUntil(async () => again.answer() !== undefined || (await stagedFiles(gw.dataDir)) > 0, {
      what: 'the upload to be staging its body',
      timeoutMs: 10_000,
    });
    await new AdminStore(db.pool).revokeKey(revoked.keyId);
    await waitUntil(
      async () => (await fetch(`${url}-probe`, { method: 'DELETE', headers: bearer(revoked.key) })).status === 401,
      {
        what: 'a new write of the revoked key to be refused',
        timeoutMs: 10_000,
      },
    );
    again.end(body.subarray(128 * 1024));
    await waitUntil(() => again.answer() !== undefined, { what: 'the upload to be answered', timeoutMs: 10_000 });
    // Before, it was answered 200 with the artifact's metadata: a revoked key learnt the bytes match.
    expect(again.answer()).toMatchObject({ status: 401 });
    expect(await stagedFiles(gw.dataDir)).toBe(0);
    expect(await gw.stop()).toBe(0);
  });
});
