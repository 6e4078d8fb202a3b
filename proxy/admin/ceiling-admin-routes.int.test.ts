/**
 * Groups and repository ceilings through the admin API on a real writer: the same rows the CLI sets, each change recorded in the audit trail with its action, bad
 * input answered 400 and unknown names 404, never 500.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
let admin: { key: string; name: string; principalId: string };
let writer: GatewayProcess;

beforeAll(async () => {
  admin = await createServiceAccount(db.pool, { name: 'ceiling-admin', scopes: ['admin'] });
  await createServiceAccount(db.pool, { name: 'crawler-1' });
  await createServiceAccount(db.pool, { name: 'crawler-2' });
  await createRepository(db.pool, 'mirror');
  await createRepository(db.pool, 'quiet');
  writer = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 60_000);

async function call(method: string, path: string, body?: unknown, url = writer.url) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { ...bearer(admin.key), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
}

async function audited(action: string): Promise<Array<Record<string, unknown>>> {
  const res = await call('GET', `/api/v1/admin/audit?action=${action}`);
  expect(res.status).toBe(200);
  return res.body.events as Array<Record<string, unknown>>;
}

describe('groups', () => {
  it('creates a group, adds and removes members, changes one ceiling keeping the other, deletes it; each change audited', async () => {
    const set = await call('PUT', '/api/v1/admin/groups/crawlers', {
      downloadBytesPerSec: 1_048_576,
      uploadBytesPerSec: 65_536,
    });
    expect(set).toEqual({
      status: 200,
      body: {
        name: 'crawlers',
        downloadBytesPerSec: 1_048_576,
        uploadBytesPerSec: 65_536,
        members: [],
        membersNextCursor: null,
      },
    });
    expect((await call('PUT', '/api/v1/admin/groups/crawlers/members/crawler-2')).body.members).toEqual(['crawler-2']);
    // Again: no change; a principal named by id works too.
    const ids = await new AdminStore(db.pool).findPrincipal('crawler-1');
    await call('PUT', '/api/v1/admin/groups/crawlers/members/crawler-2');
    expect((await call('PUT', `/api/v1/admin/groups/crawlers/members/${ids.id}`)).body.members).toEqual([
      'crawler-1',
      'crawler-2',
    ]);
    // A field left out keeps its value.
    const changed = await call('PUT', '/api/v1/admin/groups/crawlers', { uploadBytesPerSec: 0 });
    expect(changed.body).toMatchObject({ downloadBytesPerSec: 1_048_576, uploadBytesPerSec: 0 });
    // The CLI's store reads what the API wrote.
    expect((await new AdminStore(db.pool).listGroupsPage()).items).toEqual([
      {
        name: 'crawlers',
        downloadBytesPerSec: 1_048_576,
        uploadBytesPerSec: 0,
        members: ['crawler-1', 'crawler-2'],
        membersNextCursor: null,
      },
    ]);
    expect((await call('GET', '/api/v1/admin/groups')).body.groups).toEqual([changed.body]);
    const removed = await call('DELETE', '/api/v1/admin/groups/crawlers/members/crawler-2');
    expect(removed.body.members).toEqual(['crawler-1']);
    expect((await call('GET', '/api/v1/admin/groups/crawlers')).body).toEqual(removed.body);
    expect((await call('DELETE', '/api/v1/admin/groups/crawlers')).status).toBe(204);
    expect((await call('GET', '/api/v1/admin/groups/crawlers')).status).toBe(404);
    expect((await call('DELETE', '/api/v1/admin/groups/crawlers')).status).toBe(404);

    const [setEvent] = await audited('group.set'); // newest first
    expect(setEvent).toMatchObject({
      action: 'group.set',
      actor: { kind: 'principal', principalName: 'ceiling-admin' },
      target: { group: 'crawlers' },
    });
    expect(await audited('group.set')).toHaveLength(2);
    expect(await audited('group.add_member')).toHaveLength(3);
    expect(await audited('group.remove_member')).toHaveLength(1);
    // A failed delete (404) is not recorded.
    expect(await audited('group.delete')).toHaveLength(1);
  });

  it('answers 400 for a ceiling out of range, a string, an unknown field or a bad name, and 404 for an unknown principal', async () => {
    for (const body of [
      { downloadBytesPerSec: 1 },
      { downloadBytesPerSec: 65_535 },
      { downloadBytesPerSec: 2 ** 40 + 1 },
      { downloadBytesPerSec: 1.5 },
      { downloadBytesPerSec: '1048576' },
      { burstBytes: 1 },
    ]) {
      const res = await call('PUT', '/api/v1/admin/groups/g', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code).toBe('invalid_request');
    }
    expect((await call('PUT', '/api/v1/admin/groups/bad%20name', {})).status).toBe(400);
    expect((await call('GET', '/api/v1/admin/groups')).body.groups).toEqual([]);
    await call('PUT', '/api/v1/admin/groups/g', {});
    expect((await call('PUT', '/api/v1/admin/groups/g/members/nobody')).status).toBe(404);
    expect((await call('PUT', '/api/v1/admin/groups/missing/members/crawler-1')).status).toBe(404);
  });

  it('answers 404, not 500, when the group is deleted while a member is being added', async () => {
    await call('PUT', '/api/v1/admin/groups/vanishing', {});
    const deleter = await db.pool.connect();
    try {
      await deleter.query('BEGIN');
      await deleter.query(`DELETE FROM arkvory_principal_groups WHERE name = 'vanishing'`);
      // The gateway has found the group (its delete is not committed) and its insert waits for the deleter.
      const adding = call('PUT', '/api/v1/admin/groups/vanishing/members/crawler-1');
      await waitUntil(async () => {
        const { rows } = await db.pool.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
              AND query LIKE '%INSERT INTO arkvory_principal_group_members%'`,
        );
        return rows[0]!.n === '1';
      });
      await deleter.query('COMMIT');
      const res = await adding;
      expect(res.status).toBe(404);
      expect(res.body.code).toBe('not_found');
    } finally {
      deleter.release();
    }
    expect((await call('GET', '/api/v1/admin/groups/vanishing')).status).toBe(404);
  });
});

describe('repository ceilings', () => {
  it('sets them field by field, lists only repositories with a ceiling, and audits repository.ceiling', async () => {
    expect((await call('GET', '/api/v1/admin/repository-ceilings')).body).toEqual({
      repositories: [],
      nextCursor: null,
    });
    expect((await call('GET', '/api/v1/admin/repositories/quiet/ceilings')).body).toEqual({
      name: 'quiet',
      downloadBytesPerSec: 0,
      uploadBytesPerSec: 0,
      maxTransfers: 0,
    });
    await call('PUT', '/api/v1/admin/repositories/mirror/ceilings', { downloadBytesPerSec: 10_485_760 });
    const res = await call('PUT', '/api/v1/admin/repositories/mirror/ceilings', { maxTransfers: 8 });
    const mirror = { name: 'mirror', downloadBytesPerSec: 10_485_760, uploadBytesPerSec: 0, maxTransfers: 8 };
    expect(res).toEqual({ status: 200, body: mirror });
    expect((await call('GET', '/api/v1/admin/repository-ceilings')).body).toEqual({
      repositories: [mirror],
      nextCursor: null,
    });
    const events = await audited('repository.ceiling');
    expect(events).toHaveLength(2);
    // Each change once, newest first, with the ceiling it left (a row is written before its answer ends).
    expect(events.map((e) => e.details)).toEqual([mirror, { ...mirror, maxTransfers: 0 }]);
    expect(events[0]).toMatchObject({ target: { repository: 'mirror' } });
  });

  it('answers 400 for a bad value and 404 for an unknown repository', async () => {
    for (const body of [{ maxTransfers: -1 }, { maxTransfers: 100_001 }, { uploadBytesPerSec: 100 }, { x: 1 }]) {
      expect((await call('PUT', '/api/v1/admin/repositories/quiet/ceilings', body)).status).toBe(400);
    }
    expect((await call('PUT', '/api/v1/admin/repositories/nope/ceilings', { maxTransfers: 1 })).status).toBe(404);
    expect((await call('GET', '/api/v1/admin/repositories/nope/ceilings')).status).toBe(404);
  });
});
