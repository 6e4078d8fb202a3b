/**
 * `arkvory db roles` on a real PostgreSQL: every object has a grant decision and belongs to the
 * migrator; each role's own login holds its grants and is refused, with permission denied, what its
 * code never does. (The processes running as these logins: proxy/server/least-privilege.int.test.ts.)
 */
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdminStore } from '../policy/auth/admin-store.ts';
import { systemClock } from '../policy/clock.ts';
import { Coordinator } from '../policy/lease/coordinator.ts';
import { createLogger } from '../proxy/server/logger.ts';
import { createCatalog } from '../storage-adapter/catalog/catalog.ts';
import { createTestDatabase, type TestDatabase } from '../test/support/database.ts';
import { installRoleLogins, poolFor } from '../test/support/database-roles.ts';
import { runCli } from '../test/support/gateway.ts';
import { DATABASE_ROLES, type DatabaseRole, groupRoleName, grantsOf, RUNTIME_ROLES } from './grants.ts';
import { schemaObjects, undecidedObjects } from './roles.ts';
import { artifactEntry } from '../test/support/catalog-entries.ts';
import { recordAudit } from '../proxy/audit/audit-log.ts';
import { createStorageQuotas } from '../policy/quota/storage-quotas.ts';

const log = createLogger('silent');
const policy = { slots: 2, downloadBytesPerSec: 1_000_000, downloadBytesPerSecPerPrincipal: 0 };
let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;
const pools = {} as Record<DatabaseRole, pg.Pool>;
const coordinators: Coordinator[] = [];

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
  for (const role of DATABASE_ROLES) pools[role] = poolFor(urls[role]);
}, 60_000);

afterAll(async () => {
  for (const c of coordinators) await c.close();
  for (const pool of Object.values(pools)) await pool.end();
  await db?.drop();
});

async function denied(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<string> {
  const err = await pool.query(sql, params).then(
    () => undefined,
    (e: unknown) => e as { code?: string; message: string },
  );
  expect(err, `${sql} should be refused`).toBeDefined();
  expect(err!.code, err!.message).toBe('42501'); // insufficient_privilege
  return err!.message;
}

describe('db roles', () => {
  it('gives every table, sequence and function a decision, and the migrator owns them all', async () => {
    expect(await undecidedObjects(db.pool)).toEqual([]);
    const objects = await schemaObjects(db.pool);
    expect(objects.length).toBeGreaterThan(20);
    for (const o of objects) expect(o.owner, `${o.kind} ${o.name}`).toBe(groupRoleName('migrator'));
    const groups = await db.pool.query<{ rolname: string; rolcanlogin: boolean }>(
      `SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY($1)`,
      [DATABASE_ROLES.map(groupRoleName)],
    );
    expect(groups.rows).toHaveLength(DATABASE_ROLES.length);
    for (const g of groups.rows) expect(g.rolcanlogin, g.rolname).toBe(false);
  });

  it('a decision missing from the map fails the check (a table a migration adds without a grant)', async () => {
    await pools.migrator.query('CREATE TABLE arkvory_undecided_probe (id int)');
    try {
      expect(await undecidedObjects(db.pool)).toEqual(['table arkvory_undecided_probe']);
    } finally {
      await pools.migrator.query('DROP TABLE arkvory_undecided_probe');
    }
  });

  it('each runtime role holds exactly its grants: the ACLs and the map agree, both ways', async () => {
    for (const role of RUNTIME_ROLES) {
      const group = groupRoleName(role);
      // Straight from the ACLs: table-level entries, then column-level ones.
      const held = await db.pool.query<{ line: string }>(
        `SELECT c.relname || ' ' || a.privilege_type AS line
           FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a
          WHERE c.relkind = 'r' AND c.relname LIKE 'arkvory\\_%' AND a.grantee = to_regrole($1)
         UNION
         SELECT c.relname || ' ' || a.privilege_type || ' (' || att.attname || ')'
           FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid CROSS JOIN LATERAL aclexplode(att.attacl) a
          WHERE c.relkind = 'r' AND c.relname LIKE 'arkvory\\_%' AND a.grantee = to_regrole($1)`,
        [group],
      );
      const expected = grantsOf(role)
        .filter((g) => g.kind === 'table')
        .flatMap((g) => {
          const m = /^(\w+) \((.*)\)$/.exec(g.privilege);
          return m ? m[2]!.split(', ').map((c) => `${g.object} ${m[1]} (${c})`) : [`${g.object} ${g.privilege}`];
        });
      expect(new Set(held.rows.map((r) => r.line)), role).toEqual(new Set(expected));
    }
  });

  it('is idempotent: a second run changes no owner and keeps the grants', async () => {
    const again = await runCli(['db', 'roles'], { ARKVORY_DATABASE_URL: db.url });
    expect(again.code, again.stderr).toBe(0);
    const out = JSON.parse(again.stdout) as { created: string[]; ownerChanged: string[] };
    expect(out.ownerChanged).toEqual([]);
    expect(await undecidedObjects(db.pool)).toEqual([]);
  });
});

describe('the reader login', () => {
  let keyId: string;
  let principalId: string;

  beforeAll(async () => {
    // The writer's own login sets up what a reader reads.
    const admin = new AdminStore(pools.writer);
    await admin.createRepository('lp');
    const principal = await admin.createPrincipal('lp-reader');
    principalId = principal.id;
    keyId = (await admin.createKey(principal.id, { scopes: ['read'] })).keyId;
    await admin.addGrant(principal.id, 'lp', 'read');
    await createCatalog(pools.writer).insertOrGet({
      repository: 'lp',
      kind: 'artifact',
      name: 'a.bin',
      version: '',
      asset: '',
      sha256: 'a'.repeat(64),
      sizeBytes: 1,
      contentType: 'application/octet-stream',
      publishedBy: principal.id,
    });
  });

  it('reads keys, grants, the catalog and the pre-sign secrets; records last_used_at', async () => {
    const r = pools.reader;
    expect((await r.query('SELECT scopes FROM arkvory_api_keys WHERE key_id = $1', [keyId])).rows).toHaveLength(1);
    expect((await r.query('SELECT 1 FROM arkvory_grants WHERE principal_id = $1', [principalId])).rowCount).toBe(1);
    expect(
      await createCatalog(r).get({ repository: 'lp', kind: 'artifact', name: 'a.bin', version: '', asset: '' }),
    ).toMatchObject({ sha256: 'a'.repeat(64) });
    await r.query('SELECT id FROM arkvory_presign_secrets');
    await r.query('SELECT epoch FROM arkvory_auth_epoch');
    await r.query('SELECT epoch FROM arkvory_catalog_epoch');
    const used = await r.query('UPDATE arkvory_api_keys SET last_used_at = now() WHERE key_id = $1', [keyId]);
    expect(used.rowCount).toBe(1);
    await r.query(
      `INSERT INTO arkvory_forwarding_peers (peer, role) VALUES ('10.0.0.9', 'reader') ON CONFLICT (peer, role) DO UPDATE SET last_seen_at = now()`,
    );
  });

  it('is refused everything it must not do: artifacts, keys, grants, principals, schema', async () => {
    const r = pools.reader;
    await denied(
      r,
      `INSERT INTO arkvory_artifacts (repository, kind, name, sha256, size_bytes, content_type) VALUES ('lp', 'artifact', 'evil', $1, 1, 'x')`,
      ['b'.repeat(64)],
    );
    await denied(r, `DELETE FROM arkvory_artifacts`);
    await denied(r, `UPDATE arkvory_api_keys SET scopes = ARRAY['read', 'write', 'admin'] WHERE key_id = $1`, [keyId]);
    await denied(r, `UPDATE arkvory_api_keys SET revoked_at = NULL WHERE key_id = $1`, [keyId]);
    await denied(r, `INSERT INTO arkvory_grants (principal_id, repository, permission) VALUES ($1, 'lp', 'write')`, [
      principalId,
    ]);
    await denied(r, `UPDATE arkvory_grants SET permission = 'write'`);
    await denied(r, `UPDATE arkvory_principals SET disabled = false`);
    await denied(r, `INSERT INTO arkvory_presign_secrets (secret) VALUES ($1)`, [Buffer.alloc(32)]);
    await denied(r, `UPDATE arkvory_auth_epoch SET epoch = 0`);
    await denied(r, `CREATE TABLE arkvory_evil (id int)`);
    await denied(r, `ALTER TABLE arkvory_artifacts ADD COLUMN evil int`);
  });

  it('takes and renews its own lease through the functions; cannot write, delete or renew another lease', async () => {
    // The writer (its own login) records the shared policy and takes slot 0.
    const writer = await Coordinator.open({
      databaseUrl: urls.writer,
      role: 'api',
      shared: { slot: 0, policy },
      clock: systemClock,
      log,
    });
    coordinators.push(writer);
    const reader = await Coordinator.open({
      databaseUrl: urls.reader,
      role: 'reader',
      shared: { slot: 1, policy },
      clock: systemClock,
      log,
    });
    coordinators.push(reader);
    expect(reader.generation).toBe(1);
    // Its renewals (every 2 s) keep extending its row.
    const before = await db.pool.query<{ r: Date }>(
      'SELECT renewed_at AS r FROM arkvory_gateway_leases WHERE slot = 1',
    );
    await new Promise((resolve) => setTimeout(resolve, 2600));
    const after = await db.pool.query<{ r: Date }>('SELECT renewed_at AS r FROM arkvory_gateway_leases WHERE slot = 1');
    expect(after.rows[0]!.r.getTime()).toBeGreaterThan(before.rows[0]!.r.getTime());
    expect(reader.isPermitted()).toBe(true);

    const r = pools.reader;
    await denied(r, 'DELETE FROM arkvory_gateway_leases WHERE slot = 0');
    await denied(r, 'UPDATE arkvory_gateway_leases SET expires_at = now() WHERE slot = 0');
    await denied(
      r,
      `INSERT INTO arkvory_gateway_leases (slot, owner, generation, role, acquired_at, renewed_at, expires_at) VALUES (5, $1, 1, 'reader', now(), now(), now())`,
      [randomUUID()],
    );
    // Another session (even with the right owner and generation, which it can read) renews nothing.
    const slot0 = (await r.query('SELECT owner, generation FROM arkvory_gateway_leases WHERE slot = 0')).rows[0];
    const renewed = await r.query<{ ok: boolean }>('SELECT arkvory_lease_renew(0, $1, $2, 60000) AS ok', [
      slot0.owner,
      slot0.generation,
    ]);
    expect(renewed.rows[0]!.ok).toBe(false);
    // Nor can it take a live lease (its own slot, held by another session).
    const taken = await r.query('SELECT arkvory_lease_acquire(1, $1, $2, NULL, 60000) AS g', [randomUUID(), 'reader']);
    expect(taken.rows[0]!.g).toBeNull();
    // Roles without a lease get no EXECUTE at all.
    await denied(pools.worker, 'SELECT arkvory_lease_acquire(9, $1, $2, NULL, 1000)', [randomUUID(), 'reader']);
    await denied(pools.maintenance, 'SELECT arkvory_lease_renew(0, $1, 1, 1000)', [randomUUID()]);
  });
});

describe('the audit trail is append-only for every runtime role', () => {
  const insert = `INSERT INTO arkvory_audit_events (action, actor_kind, operator, host, source)
                  VALUES ('backup.create', 'operator', 'roles-test', 'host', 'cli')`;
  const MAY_INSERT: readonly string[] = ['writer', 'maintenance', 'rules'];

  it('the roles that record may insert; none may update, delete, truncate or move its sequence', async () => {
    for (const role of RUNTIME_ROLES) {
      const pool = pools[role];
      if (MAY_INSERT.includes(role)) expect((await pool.query(insert)).rowCount, role).toBe(1);
      else await denied(pool, insert);
      await denied(pool, `UPDATE arkvory_audit_events SET action = 'key.create'`);
      await denied(pool, 'DELETE FROM arkvory_audit_events');
      await denied(pool, 'TRUNCATE arkvory_audit_events');
      await denied(pool, `SELECT setval('arkvory_audit_events_id_seq', 1)`);
    }
    expect((await db.pool.query('SELECT count(*)::int AS n FROM arkvory_audit_events')).rows[0].n).toBe(
      MAY_INSERT.length,
    );
  });

  it('the roles that record choose neither `at` nor `id`: the database dates and numbers every row', async () => {
    const before = (
      await db.pool.query<{ n: string }>('SELECT coalesce(max(id), 0)::text AS n FROM arkvory_audit_events')
    ).rows[0]!.n;
    for (const role of MAY_INSERT) {
      const pool = pools[role as DatabaseRole];
      // Backdated, or numbered among old rows: refused whatever the value.
      await denied(
        pool,
        `INSERT INTO arkvory_audit_events (at, action, actor_kind, operator, host, source)
         VALUES (now() - interval '400 days', 'backup.create', 'operator', 'forger', 'host', 'cli')`,
      );
      await denied(
        pool,
        `INSERT INTO arkvory_audit_events (id, action, actor_kind, operator, host, source) OVERRIDING SYSTEM VALUE
         VALUES (1, 'backup.create', 'operator', 'forger', 'host', 'cli')`,
      );
      await denied(pool, `UPDATE arkvory_audit_events SET at = now() - interval '400 days'`);
      // What the runtime records (every column it writes) still goes in, dated and numbered by the database.
      await recordAudit(pool, {
        action: 'backup.create',
        actor: { kind: 'operator', operator: `roles-test-${role}`, host: 'host' },
        source: 'cli',
        requestId: 'r1',
        clientRequestId: 'c1',
        target: { role },
        details: {},
      });
    }
    const rows = await db.pool.query<{ operator: string; recent: boolean }>(
      `SELECT operator, at > clock_timestamp() - interval '1 minute' AS recent FROM arkvory_audit_events
        WHERE id > $1 ORDER BY id`,
      [before],
    );
    expect(rows.rows).toEqual(MAY_INSERT.map((role) => ({ operator: `roles-test-${role}`, recent: true })));
    await db.pool.query('DELETE FROM arkvory_audit_events WHERE id > $1', [before]);
  });

  it('migration 0080 takes table-wide INSERT from roles an older `db roles` made', async () => {
    const backdate = `INSERT INTO arkvory_audit_events (at, action, actor_kind, operator, host, source)
                      VALUES (now() - interval '400 days', 'backup.create', 'operator', 'forger', 'host', 'cli')`;
    // As the grants stood before it.
    await pools.migrator.query(
      'GRANT INSERT ON TABLE arkvory_audit_events TO arkvory_writer, arkvory_maintenance, arkvory_rules',
    );
    const sql = await readFile(new URL('./0080_audit_rows_dated_by_the_database.sql', import.meta.url), 'utf8');
    await pools.migrator.query(sql);
    for (const role of MAY_INSERT) await denied(pools[role as DatabaseRole], backdate);
    expect((await pools.writer.query(insert)).rowCount).toBe(1);
    await db.pool.query(`DELETE FROM arkvory_audit_events WHERE id = (SELECT max(id) FROM arkvory_audit_events)`);
  });

  it('only the writer prunes, through the owner function, which keeps at least a day', async () => {
    await db.pool.query(
      `INSERT INTO arkvory_audit_events (at, action, actor_kind, operator, host, source)
       VALUES (now() - interval '3 days', 'backup.create', 'operator', 'roles-test', 'host', 'cli')`,
    );
    for (const role of RUNTIME_ROLES.filter((r) => r !== 'writer'))
      await denied(pools[role], 'SELECT arkvory_audit_prune(1)');
    const pruned = await pools.writer.query<{ n: string }>('SELECT arkvory_audit_prune(0)::text AS n');
    expect(pruned.rows[0]!.n).toBe('1');
    expect((await db.pool.query('SELECT count(*)::int AS n FROM arkvory_audit_events')).rows[0].n).toBe(
      MAY_INSERT.length,
    );
  });
});

describe('finished upload sessions', () => {
  it('go only through the owner function, for the writer and the worker: never an unfinished one, never one under a day', async () => {
    await new AdminStore(pools.writer).createRepository('prune-sessions');
    const session = async (state: string, finishedAgo: string | null) => {
      const id = randomUUID();
      await db.pool.query(
        `INSERT INTO arkvory_upload_sessions (id, repository, kind, name, content_type, state, created_at, expires_at, finished_at)
         VALUES ($1, 'prune-sessions', 'artifact', $4, 'application/octet-stream', $2, now() - interval '30 days',
                 now() + interval '1 day', now() - $3::interval)`,
        [id, state, finishedAgo, `s-${id}`],
      );
      return id;
    };
    const old = await session('aborted', '3 days');
    const kept = [
      await session('done', '2 hours'),
      await session('open', null),
      // Not finished, whatever its finished_at says.
      await session('completing', '3 days'),
    ];
    const prune = 'SELECT arkvory_upload_sessions_prune(0, 1000)::text AS n';
    for (const role of RUNTIME_ROLES.filter((r) => r !== 'writer' && r !== 'worker')) await denied(pools[role], prune);
    for (const role of ['writer', 'worker'] as const)
      await denied(pools[role], 'DELETE FROM arkvory_upload_sessions WHERE id = $1', [old]);
    // Asked for 0 days, it keeps one.
    expect((await pools.worker.query<{ n: string }>(prune)).rows[0]!.n).toBe('1');
    expect((await pools.writer.query<{ n: string }>(prune)).rows[0]!.n).toBe('0');
    const left = await db.pool.query<{ id: string }>(
      `SELECT id FROM arkvory_upload_sessions WHERE repository = 'prune-sessions'`,
    );
    expect(left.rows.map((r) => r.id).sort()).toEqual([...kept].sort());
  });
});

describe('the writer, worker, maintenance and rules logins', () => {
  it('the writer may not alter the schema, write leases or change scopes', async () => {
    const w = pools.writer;
    await denied(w, 'ALTER TABLE arkvory_artifacts ADD COLUMN evil int');
    await denied(w, 'CREATE TABLE arkvory_evil (id int)');
    await denied(w, 'DROP TABLE arkvory_forwarding_peers');
    await denied(w, 'TRUNCATE arkvory_artifacts');
    await denied(w, 'DELETE FROM arkvory_gateway_leases');
    await denied(w, `UPDATE arkvory_api_keys SET scopes = ARRAY['admin']`);
    await denied(w, 'UPDATE arkvory_auth_epoch SET epoch = 0');
    await denied(w, 'DELETE FROM arkvory_schema_migrations');
  });

  it("the writer's delete and the worker's publish date a name again through the owner's triggers; neither reads their table", async () => {
    await new AdminStore(pools.writer).createRepository('republish');
    const entry = (digit: string) => artifactEntry('republish', 'again', digit);
    await createCatalog(pools.writer).insertOrGet(entry('a'));
    // Dated ahead of the clock: as if published within the current second.
    const { rows } = await db.pool.query<{ created_at: Date }>(
      `UPDATE arkvory_artifacts SET created_at = date_trunc('second', now()) + interval '5 seconds'
       WHERE repository = 'republish' RETURNING created_at`,
    );
    expect(await createCatalog(pools.writer).remove(entry('a'))).toBe(true);
    const again = await createCatalog(pools.worker).insertOrGet(entry('b'));
    expect(again.entry.createdAtMs).toBe(rows[0]!.created_at.getTime() + 1000);
    for (const role of ['writer', 'reader', 'worker'] as const)
      await denied(pools[role], 'SELECT * FROM arkvory_artifact_tombstones');
  });

  it('the worker reads principals and grants (a completion is asked again) but may not touch keys, change grants or delete artifacts', async () => {
    const k = pools.worker;
    await k.query(
      'SELECT p.disabled, g.permission FROM arkvory_principals p LEFT JOIN arkvory_grants g ON g.principal_id = p.id',
    );
    await denied(k, 'SELECT * FROM arkvory_api_keys');
    await denied(k, `UPDATE arkvory_grants SET permission = 'write'`);
    await denied(k, 'DELETE FROM arkvory_grants');
    await denied(k, 'UPDATE arkvory_principals SET disabled = false');
    await denied(k, 'DELETE FROM arkvory_artifacts');
    await denied(k, 'INSERT INTO arkvory_upload_jobs (session_id, parts) VALUES ($1, $2)', [randomUUID(), '[]']);
  });

  it('maintenance writes data but not the schema; rules only its overrides', async () => {
    await pools.maintenance.query('SELECT count(*) FROM arkvory_artifacts');
    await denied(pools.maintenance, 'ALTER TABLE arkvory_artifacts ADD COLUMN evil int');
    await denied(pools.maintenance, 'DELETE FROM arkvory_schema_migrations');
    await pools.rules.query('SELECT count(*) FROM arkvory_rule_overrides');
    await denied(pools.rules, 'SELECT * FROM arkvory_artifacts');
    await denied(pools.rules, `UPDATE arkvory_api_keys SET scopes = ARRAY['admin']`);
  });
});

describe('rows the database dates (0087)', () => {
  const backdatedArtifact = (name: string) =>
    `INSERT INTO arkvory_artifacts (repository, kind, name, sha256, size_bytes, content_type, created_at)
     VALUES ('dated', 'artifact', '${name}', '${'d'.repeat(64)}', 1, 'application/octet-stream', now() - interval '400 days')`;
  const writerOwn = [
    `UPDATE arkvory_principal_groups SET created_at = now() - interval '400 days'`,
    `UPDATE arkvory_principal_groups SET name = 'renamed'`,
    `UPDATE arkvory_storage_quotas SET subject = 'elsewhere'`,
  ];

  it('neither the writer nor the worker dates a published artifact, and the writer changes only ceilings and limits', async () => {
    const admin = new AdminStore(pools.writer);
    await admin.createRepository('dated');
    await admin.setGroup('dated-group', { downloadBytesPerSec: 65536 });
    await db.pool.query(
      `INSERT INTO arkvory_storage_quotas (scope, subject, limit_bytes) VALUES ('repository', 'dated', 10)`,
    );
    for (const role of ['writer', 'worker'] as const) await denied(pools[role], backdatedArtifact(`by-${role}`));
    for (const sql of writerOwn) await denied(pools.writer, sql);
    // What their code does still goes through, dated by the database.
    const published = await createCatalog(pools.worker).insertOrGet(artifactEntry('dated', 'by-worker', 'e'));
    expect(Math.abs(published.entry.createdAtMs - Date.now())).toBeLessThan(60_000);
    await createCatalog(pools.writer).insertOrGet(artifactEntry('dated', 'by-writer', 'f'));
    await admin.setGroup('dated-group', { downloadBytesPerSec: 131072, uploadBytesPerSec: 65536 });
    expect(await createStorageQuotas(pools.writer).set('repository', 'dated', 20)).toBe(true);
    const quota = await db.pool.query(
      `SELECT limit_bytes::int AS n FROM arkvory_storage_quotas WHERE subject = 'dated'`,
    );
    expect(quota.rows[0].n).toBe(20);
  });

  it('migration 0087 takes table-wide INSERT and UPDATE from roles an older `db roles` made', async () => {
    // As the grants stood before it.
    await pools.migrator.query('GRANT INSERT ON TABLE arkvory_artifacts TO arkvory_writer, arkvory_worker');
    await pools.migrator.query(
      'GRANT UPDATE ON TABLE arkvory_principal_groups, arkvory_storage_quotas TO arkvory_writer',
    );
    const sql = await readFile(
      new URL('./0087_bound_lease_slots_and_database_dated_rows.sql', import.meta.url),
      'utf8',
    );
    await pools.migrator.query(sql);
    for (const role of ['writer', 'worker'] as const) await denied(pools[role], backdatedArtifact(`again-${role}`));
    for (const statement of writerOwn) await denied(pools.writer, statement);
    await createCatalog(pools.writer).insertOrGet(artifactEntry('dated', 'after-0087', 'a'));
  });
});
