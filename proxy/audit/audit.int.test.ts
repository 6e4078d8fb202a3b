/**
 * The audit trail end to end, over real sockets and real CLI runs against a real PostgreSQL: every
 * action of the catalogue (proxy/audit/audit-event.ts) leaves exactly one row, with who, from where
 * and the request id; a refused action leaves none; the admin API and `arkvory audit list` read it
 * back with filters; retention prunes only what is older than ARKVORY_AUDIT_RETENTION_DAYS.
 */
import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway as startProcessGateway, waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { AUDIT_ACTIONS, type AuditAction, type AuditEvent } from './audit-event.ts';
import { pruneAudit } from './audit-log.ts';

const db = useTestDatabase();
let admin: { key: string; name: string; principalId: string };
let writerAccount: { key: string; name: string; principalId: string };
let gw: GatewayProcess;
/** Every action this file makes, in order, by who made it: the table must hold exactly these. */
const expected: Array<{ action: AuditAction; kind: 'principal' | 'operator' | 'anonymous' }> = [];
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

beforeAll(async () => {
  await createRepository(db.pool, 'au');
  admin = await createServiceAccount(db.pool, { scopes: ['read', 'write', 'admin'] });
  writerAccount = await createServiceAccount(db.pool, { grants: { au: 'write' } });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 60_000);

async function call(
  method: string,
  url: string,
  options: { key?: string; body?: unknown; raw?: Buffer; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...bearer(options.key ?? admin.key), ...options.headers };
  let body: Buffer | string | undefined = options.raw;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.body);
  }
  const res = await fetch(`${gw.url}${url}`, { method, headers, ...(body === undefined ? {} : { body }) });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: (text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : {}) as Record<
      string,
      unknown
    >,
  };
}

/** An API call that must succeed and be recorded as `action`: its row is there when its answer ends. */
async function apiAction(action: AuditAction, method: string, url: string, options: Parameters<typeof call>[2] = {}) {
  const res = await call(method, url, options);
  expect(res.status, `${method} ${url}: ${JSON.stringify(res.body)}`).toBeLessThan(300);
  expected.push({ action, kind: 'principal' });
  expect(await rowCount(), `the audit row of ${action}, when its answer ended`).toBe(expected.length);
  return res;
}

async function rowCount(): Promise<number> {
  return Number((await db.pool.query('SELECT count(*) AS n FROM arkvory_audit_events')).rows[0].n);
}

async function cli(action: AuditAction | null, args: string[], env: Record<string, string> = {}) {
  const out = await runCli(args, { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir, ...env });
  expect(out.code, `${args.join(' ')}: ${out.stderr}`).toBe(0);
  if (action) expected.push({ action, kind: 'operator' });
  return out;
}

async function rows(): Promise<Array<Record<string, unknown>>> {
  return (await db.pool.query('SELECT * FROM arkvory_audit_events ORDER BY id')).rows;
}

/** The recorded rows, all expected ones there (API rows before their answer ends, CLI rows before it exits). */
async function settled(): Promise<Array<Record<string, unknown>>> {
  expect(await rowCount()).toBe(expected.length);
  return rows();
}

describe('every action leaves exactly one row', () => {
  it('through the admin API, the content API and the console', async () => {
    const created = await apiAction('principal.create', 'POST', '/api/v1/admin/principals', {
      body: { name: 'audited-sa' },
    });
    const pid = created.body.id as string;
    await apiAction('principal.disable', 'POST', `/api/v1/admin/principals/${pid}/disable`);
    await apiAction('principal.enable', 'POST', `/api/v1/admin/principals/${pid}/enable`);
    await apiAction('principal.weight', 'PUT', `/api/v1/admin/principals/${pid}/bandwidth-weight`, {
      body: { bandwidthWeight: 3 },
    });
    const key = await apiAction('key.create', 'POST', `/api/v1/admin/principals/${pid}/keys`, {
      body: { scopes: ['read'] },
    });
    const rotated = await apiAction('key.rotate', 'POST', `/api/v1/admin/keys/${key.body.keyId}/rotate`, { body: {} });
    await apiAction('key.revoke', 'POST', `/api/v1/admin/keys/${rotated.body.keyId}/revoke`);
    await apiAction('certificate.bind', 'POST', `/api/v1/admin/principals/${pid}/certificates`, {
      body: { san: 'DNS:builder.example.org' },
    });
    await apiAction(
      'certificate.unbind',
      'DELETE',
      `/api/v1/admin/principals/${pid}/certificates?san=${encodeURIComponent('DNS:builder.example.org')}`,
    );
    await apiAction('repository.create', 'POST', '/api/v1/admin/repositories', { body: { name: 'au2' } });
    await apiAction('grant.set', 'PUT', `/api/v1/admin/grants/${pid}/au2`, { body: { permission: 'read' } });
    await apiAction('grant.remove', 'DELETE', `/api/v1/admin/grants/${pid}/au2`);
    await apiAction('quota.set', 'PUT', '/api/v1/admin/quotas/repositories/au2', { body: { limitBytes: 1000 } });
    await apiAction('quota.remove', 'DELETE', '/api/v1/admin/quotas/repositories/au2');
    // A principal named by its name, then by its id: both recorded under its id.
    await apiAction('quota.set', 'PUT', '/api/v1/admin/quotas/principals/audited-sa', { body: { limitBytes: 999 } });
    await apiAction('quota.remove', 'DELETE', `/api/v1/admin/quotas/principals/${pid}`);
    const rule = { name: 'audit_rule', action: 'log', characteristics: ['ip'], limit: 1000, period_s: 60 };
    await apiAction('rate_limit.publish', 'PUT', '/api/v1/admin/rate-limits', {
      body: { rate_limits: { gateway_request: [rule] } },
    });
    await apiAction('rate_limit.unpublish', 'DELETE', '/api/v1/admin/rate-limits/gateway_request/rules/audit_rule');

    const bytes = Buffer.from('audited bytes');
    const put = await apiAction('artifact.publish', 'PUT', '/api/v1/repositories/au/artifacts/a.bin', {
      key: writerAccount.key,
      raw: bytes,
    });
    expect(put.status).toBe(201);
    await apiAction('cache.purge', 'POST', '/api/v1/admin/cache/purge', { body: { sha256: sha256(bytes) } });
    await apiAction('artifact.delete', 'DELETE', '/api/v1/repositories/au/artifacts/a.bin', {
      key: writerAccount.key,
    });
    // Multipart: the session and its part are steps; the completion is the publish.
    const part = Buffer.alloc(1000, 7);
    const session = await call('POST', '/api/v1/repositories/au/artifacts/m.bin/uploads', {
      key: writerAccount.key,
      body: { size: part.length },
    });
    expect(session.status).toBe(201);
    const upload = session.body.upload as string;
    const putPart = await call('PUT', `/api/v1/repositories/au/uploads/${upload}/parts/1`, {
      key: writerAccount.key,
      raw: part,
    });
    expect(putPart.status).toBe(200);
    await apiAction('artifact.publish', 'POST', `/api/v1/repositories/au/uploads/${upload}/complete`, {
      key: writerAccount.key,
      body: { parts: [{ partNumber: 1, sha256: sha256(part) }] },
    });

    const signIn = await apiAction('console.sign_in', 'POST', '/console/session');
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
    await apiAction('console.sign_out', 'DELETE', '/console/api/session', {
      headers: { cookie, 'x-csrf-token': String(signIn.body.csrfToken) },
    });
    // A refused sign-in is recorded before its answer ends: a wrong secret by nobody known (the key
    // id it named as its target, never the key), a key without the admin scope by its principal.
    const wrongKey = `ark_${'0'.repeat(16)}_${'A'.repeat(43)}`;
    expect((await call('POST', '/console/session', { key: wrongKey })).status).toBe(401);
    expected.push({ action: 'console.sign_in_failed', kind: 'anonymous' });
    expect(await rowCount(), 'the row of a refused sign-in, when its answer ended').toBe(expected.length);
    expect((await call('POST', '/console/session', { key: writerAccount.key })).status).toBe(403);
    expected.push({ action: 'console.sign_in_failed', kind: 'principal' });
    expect(await rowCount(), 'the row of a refused sign-in, when its answer ended').toBe(expected.length);
    // Refused: nothing recorded.
    expect((await call('POST', '/api/v1/admin/principals', { body: { name: '!bad' } })).status).toBe(400);
    expect(
      (await call('POST', '/api/v1/admin/principals', { key: writerAccount.key, body: { name: 'x' } })).status,
    ).toBe(403);

    const recorded = await settled();
    expect(recorded.map((r) => r.action)).toEqual(expected.map((e) => e.action));
    // Who, from where, which request.
    const first = recorded[0]!;
    expect(first).toMatchObject({
      actor_kind: 'principal',
      principal_id: admin.principalId,
      principal_name: admin.name,
      request_id: created.headers.get('x-request-id'),
    });
    expect(first.source).toMatch(/^(::ffff:)?127\.0\.0\.1$/);
    expect(first.target).toEqual({});
    expect(first.details).toMatchObject({ principalId: pid, name: 'audited-sa' });
    // A created key is recorded by its id, never with its secret.
    const keyRow = recorded.find((r) => r.action === 'key.create')!;
    expect(keyRow.details).toMatchObject({ keyId: key.body.keyId, scopes: ['read'] });
    expect(JSON.stringify(recorded)).not.toContain(String(key.body.key));
    // Quotas are recorded as `arkvory quota` records them: the scope, the subject (a principal's id) and the limit.
    expect(
      recorded.filter((r) => String(r.action).startsWith('quota.')).map(({ target, details }) => ({ target, details })),
    ).toEqual([
      { target: { scope: 'repository', subject: 'au2' }, details: { limitBytes: 1000 } },
      { target: { scope: 'repository', subject: 'au2' }, details: {} },
      { target: { scope: 'principal', subject: pid }, details: { limitBytes: 999 } },
      { target: { scope: 'principal', subject: pid }, details: {} },
    ]);
    const failed = recorded.filter((r) => r.action === 'console.sign_in_failed');
    expect(
      failed.map(({ actor_kind, principal_id, operator, target, details }) => ({
        actor_kind,
        principal_id,
        operator,
        target,
        details,
      })),
    ).toEqual([
      {
        actor_kind: 'anonymous',
        principal_id: null,
        operator: null,
        target: { keyId: '0'.repeat(16) },
        details: { code: 'unauthorized' },
      },
      {
        actor_kind: 'principal',
        principal_id: writerAccount.principalId,
        operator: null,
        target: { keyId: writerAccount.key.split('_')[1] },
        details: { code: 'forbidden' },
      },
    ]);
    expect(failed[0]!.source).toMatch(/^(::ffff:)?127\.0\.0\.1$/);
    expect(JSON.stringify(failed)).not.toContain(writerAccount.key);
    const publish = recorded.find((r) => r.action === 'artifact.publish')!;
    expect(publish).toMatchObject({
      principal_id: writerAccount.principalId,
      target: { repo: 'au', id: 'a.bin' },
      details: { outcome: 'created', sha256: sha256(bytes), sizeBytes: bytes.length },
    });
  }, 120_000);

  it("records the gateway's own request id; a client's X-Request-Id is kept apart and never taken for it", async () => {
    const first = await apiAction('repository.create', 'POST', '/api/v1/admin/repositories', { body: { name: 'au4' } });
    const firstId = first.headers.get('x-request-id')!;
    // Another action sent with the first one's id, as if it were the same request.
    const replay = await apiAction('repository.create', 'POST', '/api/v1/admin/repositories', {
      body: { name: 'au5' },
      headers: { 'x-request-id': firstId },
    });
    expect(replay.headers.get('x-request-id')).toBe(firstId); // the client's id still comes back
    const [a, b] = (await settled()).slice(-2);
    expect(a).toMatchObject({ request_id: firstId, client_request_id: null });
    expect(b!.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(b!.request_id).not.toBe(firstId);
    expect(b!.client_request_id).toBe(firstId);
    // The recorded id names this request's log line alone; the client's is beside it.
    await waitUntil(() => gw.logLines().some((l) => l.msg === 'request' && l.reqId === b!.request_id), {
      what: 'the request line of the replayed id',
    });
    const lines = gw.logLines().filter((l) => l.msg === 'request' && l.route === '/api/v1/admin/repositories');
    expect(lines.filter((l) => l.reqId === firstId)).toHaveLength(1);
    expect(lines.filter((l) => l.reqId === b!.request_id)).toMatchObject([{ clientReqId: firstId, status: 201 }]);
    // The admin API reads it back under both names.
    const events = (await call('GET', '/api/v1/admin/audit?action=repository.create&limit=1')).body
      .events as AuditEvent[];
    expect(events[0]).toMatchObject({ requestId: b!.request_id, clientRequestId: firstId });
  });

  it('the answer ends only once the row is written: a client that saw success finds it', async () => {
    // The trail is held (inserts wait) while an action is made: its answer must wait with it.
    const lock = await db.pool.connect();
    let answered = false;
    let pending: ReturnType<typeof call> | undefined;
    try {
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE arkvory_audit_events IN SHARE ROW EXCLUSIVE MODE');
      pending = call('POST', '/api/v1/admin/repositories', { body: { name: 'au-held' } });
      void pending.then(() => (answered = true));
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(answered, 'answered while its audit row could not be written').toBe(false);
    } finally {
      await lock.query('COMMIT');
      lock.release();
    }
    expect((await pending!).status).toBe(201);
    expected.push({ action: 'repository.create', kind: 'principal' });
    expect(await rowCount()).toBe(expected.length);
    const last = (await rows()).at(-1)!;
    expect(last.action).toBe('repository.create');
    expect(JSON.stringify(last.details)).toContain('au-held');
  });

  it('an action whose JSON body holds a lone surrogate is recorded all the same, with U+FFFD for it', async () => {
    // JSON may escape half a surrogate pair: JSON.parse takes it, PostgreSQL's text reads it as
    // U+FFFD (so the artifact is found), but its jsonb refuses the escape.
    const put = await apiAction('artifact.publish', 'PUT', '/api/v1/repositories/au/artifacts/x%EF%BF%BDy', {
      key: writerAccount.key,
      raw: Buffer.from('surrogate'),
    });
    expect(put.status).toBe(201);
    const raw = Buffer.from('{"repository":"au","artifact":"x\\ud800y"}');
    await apiAction('cache.purge', 'POST', '/api/v1/admin/cache/purge', {
      raw,
      headers: { 'content-type': 'application/json' },
    });
    expect((await settled()).at(-1)!.details).toEqual({
      repository: 'au',
      artifact: 'x\ufffdy',
      purged: [sha256(Buffer.from('surrogate'))],
    });
    expect(gw.logLines().filter((l) => l.msg === 'audit entry not recorded')).toEqual([]);
  });

  it('through the CLI, as the operator on this host', async () => {
    await cli('principal.create', ['principals', 'create', 'cli-sa']);
    await cli('principal.disable', ['principals', 'disable', 'cli-sa']);
    await cli('principal.enable', ['principals', 'enable', 'cli-sa']);
    await cli('principal.weight', ['principals', 'weight', 'cli-sa', '2']);
    await cli('group.set', ['groups', 'set', 'crawlers', '--download', '1048576']);
    await cli('group.add_member', ['groups', 'add', 'crawlers', 'cli-sa']);
    await cli('group.remove_member', ['groups', 'remove', 'crawlers', 'cli-sa']);
    await cli('group.delete', ['groups', 'delete', 'crawlers']);
    await cli('certificate.bind', ['principals', 'bind-cert', 'cli-sa', 'DNS:cli.example.org']);
    await cli('certificate.unbind', ['principals', 'unbind-cert', 'cli-sa', 'DNS:cli.example.org']);
    const key = JSON.parse((await cli('key.create', ['keys', 'create', 'cli-sa'])).stdout) as { keyId: string };
    const rotated = JSON.parse((await cli('key.rotate', ['keys', 'rotate', key.keyId])).stdout) as { keyId: string };
    await cli('key.revoke', ['keys', 'revoke', rotated.keyId]);
    await cli('repository.create', ['repos', 'create', 'au3']);
    await cli('repository.ceiling', ['repos', 'ceiling', 'au3', '--download', '1048576']);
    await cli('grant.set', ['grants', 'add', 'cli-sa', 'au3', 'read']);
    await cli('grant.remove', ['grants', 'remove', 'cli-sa', 'au3']);
    await cli('quota.set', ['quota', 'set', '--repository', 'au3', '--bytes', '1M']);
    await cli('quota.remove', ['quota', 'unset', '--repository', 'au3']);
    const rules = path.join(await makeTempDir('arkvory-audit-'), 'rules.yaml');
    await writeFile(
      rules,
      'rate_limits:\n  gateway_request:\n    - name: cli_rule\n      action: log\n      characteristics: [ip]\n      limit: 1000\n      period_s: 60\n',
    );
    await cli('rate_limit.publish', ['ratelimit', 'publish', rules]);
    await cli('rate_limit.unpublish', ['ratelimit', 'unpublish', 'gateway_request', 'cli_rule']);
    await cli('cache.purge', ['cache', 'purge', '--sha256', 'a'.repeat(64)]);
    await cli('presign_secret.rotate', ['presign-secret', 'rotate']);
    await cli('backup.create', ['backup', await makeTempDir('arkvory-audit-backup-')]);
    const overrideFile = path.join(path.dirname(rules), 'override.yaml');
    await writeFile(
      overrideFile,
      'rules:\n  - name: ok_rule\n    action: limit\n    limit: 5\n    period_s: 60\n    characteristics: [principal]\n',
    );
    const subject = ['gateway_request', 'principal', writerAccount.principalId];
    await cli('rule_override.set', ['rules-service', 'set', ...subject, overrideFile, '--service', 'alpha']);
    await cli('rule_override.remove', ['rules-service', 'unset', ...subject, '--service', 'alpha']);
    // Reads change nothing.
    await cli(null, ['principals', 'list']);
    await cli(null, ['ratelimit', 'show', 'gateway_request']);
    // Offline maintenance needs every gateway stopped; a dry run is not recorded.
    await gw.stop('SIGTERM');
    await cli('policy.reset', ['policy', 'reset']);
    await cli('maintenance.scrub', ['scrub']);
    await cli(null, ['gc', '--dry-run']);
    await cli('maintenance.gc', ['gc']);

    const recorded = await settled();
    expect(recorded.map((r) => r.action)).toEqual(expected.map((e) => e.action));
    const cliRows = recorded.filter((r) => r.actor_kind === 'operator');
    expect(cliRows.length).toBe(expected.filter((e) => e.kind === 'operator').length);
    for (const r of cliRows) {
      expect(r).toMatchObject({
        operator: os.userInfo().username,
        host: os.hostname(),
        source: 'cli',
        principal_id: null,
      });
    }
    expect(cliRows.find((r) => r.action === 'grant.set')!.target).toEqual({ principal: 'cli-sa', repository: 'au3' });
    // The same shape as the admin API's quota rows (above).
    expect(
      cliRows.filter((r) => String(r.action).startsWith('quota.')).map(({ target, details }) => ({ target, details })),
    ).toEqual([
      { target: { scope: 'repository', subject: 'au3' }, details: { limitBytes: 1024 * 1024 } },
      { target: { scope: 'repository', subject: 'au3' }, details: {} },
    ]);
    // What an override set holds: how many rules and their names, as the rules service's route records it (below).
    expect(cliRows.find((r) => r.action === 'rule_override.set')!.details).toEqual({ rules: 1, names: ['ok_rule'] });
  }, 300_000);

  it("through the rules service's admin API", async () => {
    // Its routes are described by rules-service.yaml, so it runs outside the gateway contract check.
    const service = await startProcessGateway({
      args: ['rules-service', 'serve'],
      env: { ARKVORY_DATABASE_URL: db.url },
    });
    try {
      const url = `${service.url}/api/v1/admin/rule-overrides/beta/gateway_request/principal/${writerAccount.principalId}`;
      const rules = [{ name: 'svc_rule', action: 'limit', limit: 5, period_s: 60, characteristics: ['principal'] }];
      const put = await fetch(url, {
        method: 'PUT',
        headers: { ...bearer(admin.key), 'content-type': 'application/json' },
        body: JSON.stringify({ rules }),
      });
      expect(put.status, await put.text()).toBe(200);
      expected.push({ action: 'rule_override.set', kind: 'principal' });
      expect(await rowCount()).toBe(expected.length);
      // The rules set, as the CLI's row says them (above): before, the route's row held none.
      expect((await rows()).at(-1)).toMatchObject({
        action: 'rule_override.set',
        target: { service: 'beta', limiter: 'gateway_request', kind: 'principal', subject: writerAccount.principalId },
        details: { rules: 1, names: ['svc_rule'] },
      });
      const removed = await fetch(url, { method: 'DELETE', headers: bearer(admin.key) });
      expect(removed.status).toBe(204);
      expected.push({ action: 'rule_override.remove', kind: 'principal' });
      const recorded = await settled();
      expect(recorded.map((r) => r.action)).toEqual(expected.map((e) => e.action));
      expect(recorded.at(-1)).toMatchObject({
        principal_id: admin.principalId,
        target: { service: 'beta', limiter: 'gateway_request', kind: 'principal', subject: writerAccount.principalId },
      });
    } finally {
      await service.stop('SIGTERM');
    }
  }, 60_000);

  it('a restore records itself in the target, whose trail the backup does not overwrite', async () => {
    const destination = await makeTempDir('arkvory-audit-backup-');
    await cli('backup.create', ['backup', destination]);
    const target = await createTestDatabase();
    try {
      const dataDir = await makeTempDir('arkvory-audit-restore-');
      const out = await runCli(['restore', destination], {
        ARKVORY_DATABASE_URL: target.url,
        ARKVORY_DATA_DIR: dataDir,
      });
      expect(out.code, out.stderr).toBe(0);
      const restored = await target.pool.query('SELECT action, actor_kind FROM arkvory_audit_events');
      expect(restored.rows).toEqual([{ action: 'backup.restore', actor_kind: 'operator' }]);
      // With the restore, this file made every action of the catalogue.
      expect(new Set([...expected.map((e) => e.action), 'backup.restore'])).toEqual(
        new Set(Object.keys(AUDIT_ACTIONS)),
      );
    } finally {
      await target.drop();
    }
  }, 120_000);
});

describe('reading the trail', () => {
  it('the admin API pages newest first and filters by action, noun, principal and time', async () => {
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, dataDir: gw.dataDir });
    const all = await call('GET', '/api/v1/admin/audit?limit=1000');
    expect(all.status).toBe(200);
    const events = all.body.events as AuditEvent[];
    expect(events.length).toBe((await rows()).length);
    expect(events.map((e) => Number(e.id))).toEqual([...events.map((e) => Number(e.id))].sort((a, b) => b - a));

    const keys = await call('GET', '/api/v1/admin/audit?action=key&limit=2');
    expect((keys.body.events as AuditEvent[]).map((e) => e.action)).toEqual(['key.revoke', 'key.rotate']);
    const next = await call('GET', `/api/v1/admin/audit?action=key&limit=2&cursor=${keys.body.nextCursor}`);
    expect((next.body.events as AuditEvent[]).map((e) => e.action)).toEqual(['key.create', 'key.revoke']);

    const mine = await call('GET', `/api/v1/admin/audit?principal=${writerAccount.name}`);
    expect((mine.body.events as AuditEvent[]).map((e) => e.action)).toEqual([
      'artifact.publish',
      // Its key's sign-in at the console, refused for want of the admin scope.
      'console.sign_in_failed',
      'artifact.publish',
      'artifact.delete',
      'artifact.publish',
    ]);
    const future = await call('GET', '/api/v1/admin/audit?since=2999-01-01');
    expect(future.body.events).toEqual([]);
    const past = await call('GET', '/api/v1/admin/audit?until=2000-01-01');
    expect(past.body.events).toEqual([]);
    expect((await call('GET', '/api/v1/admin/audit?action=nope.never')).status).toBe(400);
    expect((await call('GET', '/api/v1/admin/audit?since=yesterday')).status).toBe(400);
    expect((await call('GET', '/api/v1/admin/audit', { key: writerAccount.key })).status).toBe(403);
  }, 60_000);

  // Date rolled these over (2024-02-30 read as March 1st) and filtered by a day nobody asked for.
  it('refuses a since or until that does not exist with the 400 of any malformed time', async () => {
    gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url }, dataDir: gw.dataDir });
    const malformed = await call('GET', '/api/v1/admin/audit?since=yesterday');
    expect(malformed.status).toBe(400);
    for (const name of ['since', 'until']) {
      for (const raw of ['2024-02-30', '2023-02-29', '2024-04-31', '2024-02-30T12:00:00Z', '2024-01-01T24:00:00Z']) {
        const res = await call('GET', `/api/v1/admin/audit?${name}=${encodeURIComponent(raw)}`);
        expect(res.status, `${name}=${raw}`).toBe(400);
        expect(res.body, `${name}=${raw}`).toEqual({
          code: 'invalid_request',
          message: String(malformed.body.message).replace(/^since/, name),
        });
      }
      const leapDay = await call('GET', `/api/v1/admin/audit?${name}=2024-02-29T23:59:59%2B02:00`);
      expect(leapDay.status, `${name} on a leap day`).toBe(200);
    }
  }, 60_000);

  it('`arkvory audit list` prints JSON lines with the same filters, one page or --all', async () => {
    const out = await cli(null, ['audit', 'list', '--action', 'principal.create']);
    const lines = out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as AuditEvent);
    expect(lines.map((e) => e.actor.kind)).toEqual(['operator', 'principal']);
    expect(lines[0]!.actor).toEqual({ kind: 'operator', operator: os.userInfo().username, host: os.hostname() });
    const page = await cli(null, ['audit', 'list', '--limit', '3']);
    expect(page.stdout.trim().split('\n')).toHaveLength(3);
    expect(page.stderr).toMatch(/^more: --cursor [A-Za-z0-9_-]+\n$/);
    const every = await cli(null, ['audit', 'list', '--limit', '2', '--all']);
    expect(every.stdout.trim().split('\n')).toHaveLength((await rows()).length);
    const bad = await runCli(['audit', 'list', '--since', 'soon'], { ARKVORY_DATABASE_URL: db.url });
    expect(bad.code).toBe(2);
  }, 120_000);
});

describe('retention', () => {
  it('prunes only rows older than the retention, never younger than a day', async () => {
    const insertAged = (days: number) =>
      db.pool.query(
        `INSERT INTO arkvory_audit_events (at, action, actor_kind, operator, host, source)
         VALUES (now() - make_interval(days => $1), 'backup.create', 'operator', 'test', 'test', 'cli')`,
        [days],
      );
    await insertAged(40);
    await insertAged(20);
    const before = (await rows()).length;
    // A writer started with a 30-day retention prunes at start.
    await gw.stop('SIGTERM');
    gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_AUDIT_RETENTION_DAYS: '30' },
      dataDir: gw.dataDir,
    });
    await waitUntil(async () => (await rows()).length === before - 1, { what: 'the 40-day-old row pruned' });
    expect(await pruneAudit(db.pool, 0)).toBe(1); // the 20-day-old row: a retention below a day counts as one
    expect((await rows()).length).toBe(before - 2);
  }, 60_000);
});

afterAll(async () => {
  await gw?.stop('SIGTERM');
});
