/**
 * Phase 3 end to end (spec 3.1, 3.3): real gateway processes ask a real reference rules service
 * (`arkvory rules-service serve`) over loopback. Overrides are edited through the service's admin
 * routes; the service is paused (SIGSTOP: connections accepted, nothing answered) and killed to show
 * the fail-open path, and a row written behind the service's back shows a malformed answer rejected.
 * Started before its PostgreSQL (a real toxiproxy link, disabled), the service waits as a gateway does.
 * Every response the rules service gave is checked against proxy/openapi/rules-service.yaml.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { loadOpenApiDocument, undescribedResponses } from '../openapi/contract.ts';
import { RULES_SERVICE_OPENAPI_PATH } from '../openapi/rules-service-contract.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { CLI, type GatewayProcess, ROOT, runCli, makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { freeLoopbackPort, waitUntil } from '../../test/harness/index.ts';
import { addLatency, startToxiproxy } from '../../chaos/support/toxiproxy.ts';

const db = useTestDatabase();

interface RulesServiceProcess {
  url: string;
  child: ChildProcess;
  logs(): string;
  exited: Promise<number | string>;
}

const services: RulesServiceProcess[] = [];
afterAll(async () => {
  for (const s of services) if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
  await Promise.all(services.map((s) => s.exited));
  const lines = services.flatMap(logLines);
  const problems = undescribedResponses(await loadOpenApiDocument(RULES_SERVICE_OPENAPI_PATH), lines);
  if (problems.length)
    throw new Error(
      `rules-service responses proxy/openapi/rules-service.yaml does not describe:\n${problems.join('\n')}`,
    );
});

/** `waitFor: 'none'`: returns once spawned, for a service that does not serve yet (or exits). */
async function startRulesService(
  env: Record<string, string> = {},
  options: { waitFor?: 'serving' | 'none' } = {},
): Promise<RulesServiceProcess> {
  const port = await freeLoopbackPort();
  const child = spawn(process.execPath, [CLI, 'rules-service', 'serve'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_PORT: String(port),
      ARKVORY_HOST: '127.0.0.1',
      ARKVORY_RULES_SERVICE_TTL_SECONDS: '1',
      // Every response's line for the contract check: past the client-fault budget they are at debug.
      ARKVORY_LOG_LEVEL: 'debug',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const service = { url: `http://127.0.0.1:${port}`, child, logs: () => out, exited };
  services.push(service);
  if (options.waitFor !== 'none') await untilServing(service);
  return service;
}

async function untilServing(service: RulesServiceProcess): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (service.child.exitCode !== null) throw new Error(`rules service exited:\n${service.logs()}`);
    try {
      if ((await fetch(`${service.url}/health/status`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  throw new Error(`rules service did not start:\n${service.logs()}`);
}

/** The service's JSON log lines. */
function logLines(service: RulesServiceProcess): Array<Record<string, unknown>> {
  return service
    .logs()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
}

const retryLines = (service: RulesServiceProcess) =>
  logLines(service).filter((l) => l.msg === 'PostgreSQL not reachable at startup; retrying');

/**
 * Waits until the service has logged `count` startup retries; fails at once if it exits first. The
 * bound is generous: a loaded machine can take seconds to start a process before its first attempt.
 */
async function untilRetried(service: RulesServiceProcess, count: number): Promise<void> {
  for (const deadline = performance.now() + 30_000; performance.now() < deadline; ) {
    if (retryLines(service).length >= count) return;
    if (service.child.exitCode !== null) throw new Error(`rules service exited:\n${service.logs()}`);
    await sleep(25);
  }
  throw new Error(`rules service did not retry ${count} time(s):\n${service.logs()}`);
}

async function putOverride(
  service: RulesServiceProcess,
  adminKey: string,
  target: { service: string; limiter: string; kind: string; subject: string },
  rules: unknown,
): Promise<Response> {
  return fetch(
    `${service.url}/api/v1/admin/rule-overrides/${target.service}/${target.limiter}/${target.kind}/${encodeURIComponent(target.subject)}`,
    {
      method: 'PUT',
      headers: { ...bearer(adminKey), 'content-type': 'application/json' },
      body: JSON.stringify({ rules }),
    },
  );
}

/** Rules-service lookups with this result in a gateway's /metrics, summed over its limiters. */
async function rulesServiceCount(gatewayUrl: string, result: string): Promise<number> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('arkvory_rate_limit_rules_service_requests_total{') && l.includes(`result="${result}"`))
    .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
}

/**
 * The gateway's line saying a rules-service answer was unusable. The counter moves before pino's
 * line has crossed the stdout pipe: waits for the line.
 */
function unusableAnswerLine(gw: GatewayProcess): Promise<Record<string, unknown>> {
  return vi.waitFor(
    () => {
      const line = gw.logLines().find((l) => l.msg === 'rules service answer unusable; local rate-limit rules apply');
      if (!line) throw new Error('no "rules service answer unusable" log line yet');
      return line;
    },
    { timeout: 5_000, interval: 50 },
  );
}

const capRule = (name: string, limit: number) => ({
  name,
  action: 'limit',
  characteristics: ['principal'],
  limit,
  period_s: 3600,
});

function gatewayEnv(service: RulesServiceProcess, extra: Record<string, string> = {}): Record<string, string> {
  return {
    ARKVORY_DATABASE_URL: db.url,
    ARKVORY_RULES_SERVICE_URL: service.url,
    ARKVORY_SERVICE_NAME: 'alpha',
    ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS: '60',
    ARKVORY_RULES_SERVICE_TIMEOUT_MS: '1000',
    ...extra,
  };
}

describe('external rules service (Phase 3) with real processes', () => {
  it('applies a per-principal override from the next cache expiry on, and edits it through the admin routes and the CLI', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const gw = await startGateway({ env: gatewayEnv(service) });
    const list = () => fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });

    const before = await list();
    expect(before.status).toBe(200);
    expect(before.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');

    const put = await putOverride(
      service,
      admin.key,
      { service: 'alpha', limiter: 'gateway_request', kind: 'principal', subject: user.principalId },
      [capRule('contract_cap', 3)],
    );
    expect(put.status).toBe(200);
    expect((await put.json()) as unknown).toMatchObject({
      override: { service: 'alpha', limiter: 'gateway_request', subject_kind: 'principal', subject: user.principalId },
    });

    // The service answers ttl_s 1: the cached "no overrides" answer expires within a second.
    const changedBy = Date.now() + 3000;
    let policy = before.headers.get('ratelimit-policy');
    while (Date.now() < changedBy && policy !== '"contract_cap";q=3;w=3600') {
      await sleep(100);
      policy = (await list()).headers.get('ratelimit-policy');
    }
    expect(policy).toBe('"contract_cap";q=3;w=3600');
    let last = await list();
    for (let i = 0; i < 5 && last.status !== 429; i++) last = await list();
    expect(last.status).toBe(429);
    expect(((await last.json()) as { code: string }).code).toBe('rate_limited');
    // Another principal is untouched.
    const other = await createServiceAccount(db.pool);
    const otherRes = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(other.key) });
    expect(otherRes.status).toBe(200);
    expect(otherRes.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
    expect(await rulesServiceCount(gw.url, 'hit')).toBeGreaterThan(0);
    expect(await rulesServiceCount(gw.url, 'miss')).toBeGreaterThan(0);

    // The CLI edits the same table: list shows it, unset removes it, and the local rules return.
    const cliEnv = { ARKVORY_DATABASE_URL: db.url, ARKVORY_SERVICE_NAME: 'alpha' };
    const listed = await runCli(['rules-service', 'list', '--limiter', 'gateway_request'], cliEnv);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain('contract_cap');
    const unset = await runCli(['rules-service', 'unset', 'gateway_request', 'principal', user.principalId], cliEnv);
    expect(unset.code, unset.stderr).toBe(0);
    const backBy = Date.now() + 3000;
    let back = await list();
    while (
      Date.now() < backBy &&
      back.headers.get('ratelimit-policy') !== '"limit_requests_by_principal";q=12000;w=60'
    ) {
      await sleep(100);
      back = await list();
    }
    expect(back.status).toBe(200);
    expect(back.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
  });

  it('validates overrides with the one rule schema (admin route and CLI), and needs an admin key', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const target = { service: 'alpha', limiter: 'gateway_request', kind: 'principal', subject: user.principalId };
    const bad = await putOverride(service, admin.key, target, [
      { name: 'Bad Name', action: 'throttle', characteristics: ['colour'] },
    ]);
    expect(bad.status).toBe(400);
    const body = (await bad.json()) as { code: string; message: string };
    expect(body.code).toBe('invalid_request');
    expect(body.message).toMatch(/name must match/);
    expect(body.message).toMatch(/action must be one of/);
    expect(body.message).toMatch(/"colour" is not an available property/);
    expect((await putOverride(service, user.key, target, [capRule('x', 1)])).status).toBe(403);
    // Spec 2.1: a bypass served to every gateway needs a publisher named in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS.
    const bypass = await putOverride(service, admin.key, target, [{ name: 'vip_bypass', action: 'skip' }]);
    expect(bypass.status).toBe(403);
    expect(((await bypass.json()) as { message: string }).message).toContain('rule "vip_bypass"');
    expect((await putOverride(service, admin.key, { ...target, limiter: 'auth_failure' }, [])).status).toBe(400); // auth_failure has no principal
    const missing = await fetch(`${service.url}/api/v1/admin/rule-overrides/alpha/gateway_request/principal/nobody`, {
      method: 'DELETE',
      headers: bearer(admin.key),
    });
    expect(missing.status).toBe(404);

    const dir = await makeTempDir('arkvory-overrides-');
    const file = path.join(dir, 'rules.yaml');
    await writeFile(
      file,
      'rules:\n  - name: ok_rule\n    action: limit\n    limit: 5\n    characteristics: [principal]\n',
    );
    const cli = await runCli(
      ['rules-service', 'set', 'gateway_request', 'principal', user.principalId, file, '--service', 'alpha'],
      { ARKVORY_DATABASE_URL: db.url },
    );
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain('limit and log rules require limit and period_s');
    const query = await fetch(`${service.url}/api/v1/rules/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'alpha', limiter: 'nope', identifier: {} }),
    });
    expect(query.status).toBe(400);
  });

  it('guards the query with ARKVORY_RULES_SERVICE_TOKEN; a gateway with the same token gets its rules', async () => {
    const token = 'rules-token-for-this-test';
    const service = await startRulesService({ ARKVORY_RULES_SERVICE_TOKEN: token });
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const body = JSON.stringify({
      service: 'tokened',
      limiter: 'gateway_request',
      identifier: { principal: user.principalId },
    });
    const query = (headers: Record<string, string>) =>
      fetch(`${service.url}/api/v1/rules/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
      });
    expect((await query({})).status).toBe(401);
    expect((await query(bearer('wrong'))).status).toBe(401);
    expect((await query(bearer(admin.key))).status).toBe(401); // an API key is not the token
    expect(await (await query(bearer(token))).json()).toEqual({ rules: [], ttl_s: 1, varies_by: [] });
    // The scheme in any case (RFC 9110 §11.1), as the gateway's own routes take it.
    for (const scheme of ['bearer', 'BEARER'])
      expect((await query({ authorization: `${scheme} ${token}` })).status, scheme).toBe(200);
    expect(
      (
        await putOverride(
          service,
          admin.key,
          { service: 'tokened', limiter: 'gateway_request', kind: 'principal', subject: user.principalId },
          [capRule('tokened_cap', 9)],
        )
      ).status,
    ).toBe(200);
    const gw = await startGateway({
      env: gatewayEnv(service, { ARKVORY_SERVICE_NAME: 'tokened', ARKVORY_RULES_SERVICE_TOKEN: token }),
    });
    const res = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
    expect(res.headers.get('ratelimit-policy')).toBe('"tokened_cap";q=9;w=3600');
    expect(await rulesServiceCount(gw.url, 'error')).toBe(0);
  });

  it('keeps rules of two services that share a limiter name apart', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    // Gateway beta runs on a database of its own (one writer per database), same repository name.
    const other = await createTestDatabase();
    try {
      await createRepository(db.pool, 'shared-repo');
      await createRepository(other.pool, 'shared-repo');
      const alphaUser = await createServiceAccount(db.pool, { grants: { 'shared-repo': 'read' } });
      const betaUser = await createServiceAccount(other.pool, { grants: { 'shared-repo': 'read' } });
      const repoTarget = (svc: string) => ({
        service: svc,
        limiter: 'gateway_request',
        kind: 'repository',
        subject: 'shared-repo',
      });
      expect(
        (
          await putOverride(service, admin.key, repoTarget('alpha'), [
            { name: 'alpha_repo_cap', action: 'limit', characteristics: ['repository'], limit: 7, period_s: 60 },
          ])
        ).status,
      ).toBe(200);
      expect(
        (
          await putOverride(service, admin.key, repoTarget('beta'), [
            { name: 'beta_repo_cap', action: 'limit', characteristics: ['repository'], limit: 11, period_s: 60 },
          ])
        ).status,
      ).toBe(200);
      const alpha = await startGateway({ env: gatewayEnv(service) });
      const beta = await startGateway({
        env: { ...gatewayEnv(service, { ARKVORY_SERVICE_NAME: 'beta' }), ARKVORY_DATABASE_URL: other.url },
      });
      const artifact = '/api/v1/repositories/shared-repo/artifacts/none';
      const a = await fetch(`${alpha.url}${artifact}`, { headers: bearer(alphaUser.key) });
      const b = await fetch(`${beta.url}${artifact}`, { headers: bearer(betaUser.key) });
      expect(a.status).toBe(404);
      expect(b.status).toBe(404);
      expect(a.headers.get('ratelimit-policy')).toBe('"alpha_repo_cap";q=7;w=60');
      expect(b.headers.get('ratelimit-policy')).toBe('"beta_repo_cap";q=11;w=60');
      await alpha.stop();
      await beta.stop();
    } finally {
      await other.drop();
    }
  });

  it('an answer varying by repository is not asked for again per repository name a client invents: unknown names stop at the grant check', async () => {
    const service = await startRulesService({ ARKVORY_RULES_SERVICE_TTL_SECONDS: '60' });
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    await createRepository(db.pool, 'varied');
    const user = await createServiceAccount(db.pool, { grants: { varied: 'read' } });
    const target = { service: 'alpha', limiter: 'gateway_request', kind: 'repository', subject: 'varied' };
    expect(
      (
        await putOverride(service, admin.key, target, [
          { ...capRule('repo_cap', 1000), characteristics: ['repository', 'principal'] },
        ])
      ).status,
    ).toBe(200);
    try {
      const gw = await startGateway({ env: gatewayEnv(service) });
      const read = (repo: string, headers: Record<string, string>) =>
        fetch(`${gw.url}/api/v1/repositories/${repo}/artifacts/x/content`, { headers }).then((r) => r.status);
      expect(await read('varied', bearer(user.key))).toBe(404); // no such artifact; the answer is cached
      const before = await rulesServiceCount(gw.url, 'miss');
      for (let i = 0; i < 10; i++) {
        expect(await read(`made-up-${i}`, bearer(user.key))).toBe(404);
        expect(await read(`made-up-${i}`, {})).toBe(401);
      }
      expect(await rulesServiceCount(gw.url, 'miss')).toBe(before);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_rule_overrides WHERE subject = 'varied'`);
    }
  });

  it('rejects and logs a malformed answer; the local rules apply', async () => {
    const service = await startRulesService();
    const user = await createServiceAccount(db.pool);
    // Written behind the service's back (as a manual SQL edit would): the service passes it on.
    await db.pool.query(
      `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules) VALUES ('alpha', 'gateway_request', 'principal', $1, $2::jsonb)`,
      [user.principalId, JSON.stringify([{ name: 'broken', action: 'throttle', limit: 1, period_s: 60 }])],
    );
    try {
      const gw = await startGateway({ env: gatewayEnv(service) });
      const res = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
      expect(res.status).toBe(200);
      expect(res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
      expect(await rulesServiceCount(gw.url, 'invalid')).toBe(1);
      const warning = await unusableAnswerLine(gw);
      expect(warning).toMatchObject({ result: 'invalid', code: 'rules_service_invalid', limiter: 'gateway_request' });
      expect(String((warning!.problems as string[])[0])).toMatch(/action must be one of limit, log, skip/);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_rule_overrides WHERE subject = $1`, [user.principalId]);
    }
  });

  it('refuses an answer longer than 1 MiB without reading it all; the local rules apply', async () => {
    const service = await startRulesService();
    const user = await createServiceAccount(db.pool);
    // One valid rule whose description alone makes the answer 1.5 MiB (the schema bounds neither).
    const huge = { ...capRule('contract_cap', 1), description: 'x'.repeat(1536 * 1024) };
    await db.pool.query(
      `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules) VALUES ('alpha', 'gateway_request', 'principal', $1, $2::jsonb)`,
      [user.principalId, JSON.stringify([huge])],
    );
    try {
      const gw = await startGateway({ env: gatewayEnv(service) });
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
        expect(res.status).toBe(200);
        expect(res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
      }
      expect(await rulesServiceCount(gw.url, 'invalid')).toBeGreaterThanOrEqual(1);
      const warning = await unusableAnswerLine(gw);
      expect(warning).toMatchObject({ result: 'invalid', code: 'rules_service_invalid' });
      expect(JSON.stringify(warning.err)).toMatch(/longer than 1048576 bytes/);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_rule_overrides WHERE subject = $1`, [user.principalId]);
    }
  });

  it('fails open within the timeout when the service hangs or dies, counts it, then skips it while the circuit is open', async () => {
    const service = await startRulesService();
    const user = await createServiceAccount(db.pool);
    const timeoutMs = 500;
    const gw = await startGateway({
      env: gatewayEnv(service, {
        ARKVORY_RULES_SERVICE_TIMEOUT_MS: String(timeoutMs),
        ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS: '1',
      }),
    });
    const timed = async () => {
      const started = performance.now();
      const res = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
      await res.arrayBuffer();
      return { res, ms: performance.now() - started };
    };
    // Warm: the answer is cached for 1 s. Waited for until the service answered with the circuit
    // closed: on a loaded machine the gateway's first lookups, while both processes were still
    // starting, outlasted the timeout and opened the circuit, and the paused service below was then
    // never asked.
    const rulesCircuit = async () =>
      (
        (await (await fetch(`${gw.url}/health/ready`, { headers: bearer(user.key) })).json()) as {
          rateLimits: { rulesService: string };
        }
      ).rateLimits.rulesService;
    await waitUntil(
      async () =>
        (await timed()).res.status === 200 &&
        (await rulesServiceCount(gw.url, 'miss')) >= 1 &&
        (await rulesCircuit()) === 'closed',
      { what: 'an answer from the rules service with the circuit closed', timeoutMs: 30_000, intervalMs: 200 },
    );
    await sleep(1100);
    const unusableLines = () =>
      gw.logLines().filter((l) => l.msg === 'rules service answer unusable; local rate-limit rules apply');
    // What a start on a loaded machine counted and logged before the pause.
    const timeoutsBefore = await rulesServiceCount(gw.url, 'timeout');
    const linesBefore = unusableLines().length;

    // Paused: the kernel still accepts connections, nothing answers. The first lookup waits for the
    // timeout, which opens the circuit: the request's other lookups skip the service, the local
    // rules decide.
    service.child.kill('SIGSTOP');
    try {
      const slow = await timed();
      expect(slow.res.status).toBe(200);
      expect(slow.res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
      expect(slow.ms).toBeGreaterThanOrEqual(timeoutMs * 0.9);
      // One timeout, not one per limiter: the counter, not the clock, is the proof (a loaded machine stretches times).
      expect(await rulesServiceCount(gw.url, 'timeout')).toBe(timeoutsBefore + 1);
      // The circuit is open: no waiting for the service at all.
      const fast = await timed();
      expect(fast.res.status).toBe(200);
      expect(fast.ms).toBeLessThan(timeoutMs);
      expect(await rulesServiceCount(gw.url, 'timeout')).toBe(timeoutsBefore + 1);
      expect(await rulesServiceCount(gw.url, 'circuit_open')).toBeGreaterThanOrEqual(1);
      // At most once per interval (10 s): logged now unless a start-up failure was logged within it.
      if (linesBefore === 0) {
        await unusableAnswerLine(gw); // the counter moved before the line crossed the stdout pipe
        expect(unusableLines().length).toBe(1);
      } else expect(unusableLines().length - linesBefore).toBeLessThanOrEqual(1);
    } finally {
      service.child.kill('SIGCONT');
    }

    // Killed: connections are refused; once the circuit lets a probe through it fails fast.
    service.child.kill('SIGKILL');
    await service.exited;
    const errorsBefore = await rulesServiceCount(gw.url, 'error'); // (this scrape is a check too: circuit still open)
    await sleep(5200); // the circuit's open interval: the next miss probes the dead service
    const dead = await timed();
    expect(dead.res.status).toBe(200);
    expect(dead.res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
    expect(dead.ms).toBeLessThan(timeoutMs);
    expect(await rulesServiceCount(gw.url, 'error')).toBeGreaterThan(errorsBefore);
    expect(
      (await fetch(`${gw.url}/health/ready`, { headers: bearer(user.key) }).then((r) => r.json())) as unknown,
    ).toMatchObject({ rateLimits: { rulesService: 'open' } });
  });
});

describe('a rules service that answers 503 with Retry-After', () => {
  it('is left alone: the first such answer opens the gateway circuit, the next lookups skip the service', async () => {
    const toxiproxy = await startToxiproxy();
    try {
      // The service's PostgreSQL behind a real toxiproxy link: hung, every query answers 503
      // `unavailable` with Retry-After 1 after the service's statement deadline.
      const link = await toxiproxy.proxyToUrl(db.url);
      const service = await startRulesService({
        ARKVORY_DATABASE_URL: link.through(db.url),
        ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '100',
        ARKVORY_RULES_SERVICE_TTL_SECONDS: '0', // nothing cached: every lookup asks
      });
      const user = await createServiceAccount(db.pool);
      const gw = await startGateway({ env: gatewayEnv(service, { ARKVORY_RULES_SERVICE_TIMEOUT_MS: '3000' }) });
      const list = () => fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
      expect((await list()).status).toBe(200);
      expect(await rulesServiceCount(gw.url, 'error')).toBe(0);

      await addLatency(link, { name: 'hang', stream: 'downstream', latencyMs: 60_000 });
      for (let i = 0; i < 3; i++) {
        const res = await list();
        expect(res.status).toBe(200);
        expect(res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
      }
      // One 503 asked, not one per lookup until three in a row opened the circuit.
      expect(await rulesServiceCount(gw.url, 'error')).toBe(1);
      expect(await rulesServiceCount(gw.url, 'circuit_open')).toBeGreaterThanOrEqual(3);
      expect(
        (await fetch(`${gw.url}/health/ready`, { headers: bearer(user.key) }).then((r) => r.json())) as unknown,
      ).toMatchObject({ rateLimits: { rulesService: 'open' } });
    } finally {
      await toxiproxy.stop();
    }
  });
});

describe('overrides under hostile input (issue 35)', () => {
  /** Follows nextCursor from `path`; every override seen and the largest page. */
  async function walkOverrides(service: RulesServiceProcess, key: string, path: string) {
    const seen: string[] = [];
    let cursor: string | null = null;
    let largest = 0;
    do {
      const res = await fetch(`${service.url}${path}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
        headers: bearer(key),
      });
      expect(res.status).toBe(200);
      const page = (await res.json()) as {
        overrides: Array<{ limiter: string; subject_kind: string; subject: string }>;
        nextCursor: string | null;
      };
      largest = Math.max(largest, page.overrides.length);
      seen.push(...page.overrides.map((o) => `${o.limiter}/${o.subject_kind}/${o.subject}`));
      cursor = page.nextCursor;
    } while (cursor !== null);
    return { seen, largest };
  }

  it('answers 503 unavailable when an override write is cut before its COMMIT, rules_outcome_unknown and an audit row saying so when cut during it', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const target = { service: 'alpha', limiter: 'gateway_request', kind: 'principal', subject: user.principalId };
    const remove = () =>
      fetch(
        `${service.url}/api/v1/admin/rule-overrides/alpha/gateway_request/principal/${encodeURIComponent(user.principalId)}`,
        { method: 'DELETE', headers: bearer(admin.key) },
      );
    expect((await putOverride(service, admin.key, target, [capRule('cut_rule', 5)])).status).toBe(200);
    // The backend running the trigger ends its own session: the connection is cut there.
    await db.pool.query(`CREATE OR REPLACE FUNCTION arkvory_test_cut_override() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$`);
    try {
      await db.pool.query(`CREATE TRIGGER arkvory_test_cut BEFORE INSERT OR UPDATE OR DELETE ON arkvory_rule_overrides
        FOR EACH ROW EXECUTE FUNCTION arkvory_test_cut_override()`);
      for (const res of [await putOverride(service, admin.key, target, [capRule('cut_rule', 6)]), await remove()]) {
        expect(res.status).toBe(503);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(await res.json()).toMatchObject({ code: 'unavailable', message: expect.stringContaining('nothing') });
      }
      await db.pool.query('DROP TRIGGER arkvory_test_cut ON arkvory_rule_overrides');
      // Cut inside the COMMIT (a deferred trigger runs there): the change may or may not have landed.
      await db.pool.query(`CREATE CONSTRAINT TRIGGER arkvory_test_cut_commit AFTER INSERT OR UPDATE OR DELETE ON arkvory_rule_overrides
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION arkvory_test_cut_override()`);
      for (const res of [await putOverride(service, admin.key, target, [capRule('cut_rule', 7)]), await remove()]) {
        expect(res.status).toBe(503);
        expect(await res.json()).toMatchObject({ code: 'rules_outcome_unknown' });
      }
      // The CLI's set and unset exit 4 (not 0: unconfirmed; not 1: it may have been made), audited as unknown.
      const file = path.join(await makeTempDir('arkvory-cut-'), 'rules.json');
      await writeFile(file, JSON.stringify([capRule('cut_rule', 8)]));
      const cliEnv = { ARKVORY_DATABASE_URL: db.url, ARKVORY_SERVICE_NAME: 'alpha' };
      for (const args of [
        ['set', 'gateway_request', 'principal', user.principalId, file],
        ['unset', 'gateway_request', 'principal', user.principalId],
      ]) {
        const cli = await runCli(['rules-service', ...args], cliEnv);
        expect([cli.code, cli.stdout], cli.stderr).toEqual([4, '']);
        expect(cli.stderr).toContain(`arkvory rules-service ${args[0]}: store_outcome_unknown:`);
      }
    } finally {
      await db.pool.query('DROP TRIGGER IF EXISTS arkvory_test_cut ON arkvory_rule_overrides');
      await db.pool.query('DROP TRIGGER IF EXISTS arkvory_test_cut_commit ON arkvory_rule_overrides');
    }
    // Both are in the audit trail, saying their outcome is unknown: before, neither left a row.
    const audited = await db.pool.query(
      `SELECT action, source, details FROM arkvory_audit_events WHERE details->>'outcome' = 'unknown' AND target->>'subject' = $1 ORDER BY id`,
      [user.principalId],
    );
    expect(audited.rows).toEqual([
      {
        action: 'rule_override.set',
        source: '127.0.0.1',
        details: { outcome: 'unknown', rules: 1, names: ['cut_rule'] },
      },
      { action: 'rule_override.remove', source: '127.0.0.1', details: { outcome: 'unknown' } },
      { action: 'rule_override.set', source: 'cli', details: { outcome: 'unknown', rules: 1, names: ['cut_rule'] } },
      { action: 'rule_override.remove', source: 'cli', details: { outcome: 'unknown' } },
    ]);
    // The store's failure is no fault of the service's: no error line.
    expect(logLines(service).filter((l) => Number(l.level) >= 50)).toEqual([]);
    await db.pool.query('DELETE FROM arkvory_rule_overrides WHERE subject = $1', [user.principalId]);
  });

  it('stores an override whose description holds half a surrogate pair, with U+FFFD for it: not a 500', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const target = { service: 'alpha', limiter: 'gateway_request', kind: 'principal', subject: user.principalId };
    // JSON.stringify writes the lone half as the escape "\ud800": valid JSON, refused by jsonb as is.
    const put = await putOverride(service, admin.key, target, [
      { ...capRule('lone_half', 5), description: 'a\ud800b' },
    ]);
    expect(put.status).toBe(200);
    const { rows } = await db.pool.query<{ rules: Array<{ description: string }> }>(
      'SELECT rules FROM arkvory_rule_overrides WHERE subject = $1',
      [user.principalId],
    );
    expect(rows[0]!.rules[0]!.description).toBe('a\ufffdb');
    await db.pool.query('DELETE FROM arkvory_rule_overrides WHERE subject = $1', [user.principalId]);
  });

  it('an override written into PostgreSQL by hand nested thousands of levels deep is left out and logged, and listed as unreadable: not a 500', async () => {
    const service = await startRulesService();
    const user = await createServiceAccount(db.pool);
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`;
    await db.pool.query(
      `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules)
         VALUES ('hand', 'gateway_request', 'principal', $1, $2::jsonb), ('hand', 'gateway_request', 'repository', 'libs', $3::jsonb)`,
      [
        user.principalId,
        `[{"name":"deep","action":"log","limit":1,"period_s":1,"match":${deep}}]`,
        JSON.stringify([capRule('repo_cap', 7)]),
      ],
    );
    try {
      const res = await fetch(`${service.url}/api/v1/rules/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          service: 'hand',
          limiter: 'gateway_request',
          identifier: { principal: user.principalId, repository: 'libs' },
        }),
      });
      expect(res.status).toBe(200);
      // The repository's override still applies.
      expect(await res.json()).toEqual({
        rules: [capRule('repo_cap', 7)],
        ttl_s: 1,
        varies_by: ['principal', 'repository'],
      });
      await expect
        .poll(() => logLines(service).filter((l) => l.code === 'invalid_stored_override'))
        .toEqual([
          expect.objectContaining({
            subject: user.principalId,
            problem: 'the stored rules nest deeper than 64 levels',
          }),
        ]);
      const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
      const listed = await fetch(`${service.url}/api/v1/admin/rule-overrides?service=hand`, {
        headers: bearer(admin.key),
      });
      expect(listed.status).toBe(200);
      const { overrides } = (await listed.json()) as { overrides: Array<Record<string, unknown>> };
      expect(overrides.map((o) => [o.subject, o.rules, o.unreadable])).toEqual([
        [user.principalId, null, 'the stored rules nest deeper than 64 levels'],
        ['libs', [capRule('repo_cap', 7)], undefined],
      ]);
    } finally {
      await db.pool.query(`DELETE FROM arkvory_rule_overrides WHERE service = 'hand'`);
    }
  });

  it('counts an override whose audit row the database refused on its metrics port; the override stands', async () => {
    const metricsPort = await freeLoopbackPort();
    const service = await startRulesService({ ARKVORY_METRICS_PORT: String(metricsPort) });
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const target = { service: 'alpha', limiter: 'gateway_request', kind: 'principal', subject: user.principalId };
    // A check only new rows must pass: this one refuses every rule_override.set row.
    await db.pool.query(
      `ALTER TABLE arkvory_audit_events ADD CONSTRAINT refuse_override_rows CHECK (action <> 'rule_override.set') NOT VALID`,
    );
    let put: Response;
    try {
      put = await putOverride(service, admin.key, target, [capRule('unaudited', 5)]);
    } finally {
      await db.pool.query('ALTER TABLE arkvory_audit_events DROP CONSTRAINT refuse_override_rows');
    }
    expect(put.status).toBe(200);
    // The line crosses the service's stdout pipe after its answer: waited for, then counted once.
    await expect
      .poll(() => logLines(service).filter((l) => l.msg === 'audit entry not recorded'), { timeout: 10_000 })
      .toHaveLength(1);
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(text).toMatch(/^arkvory_audit_entries_not_recorded_total\{reason="failed"\} 1$/m);
    expect(text).toMatch(/^arkvory_audit_entries_not_recorded_total\{reason="timeout"\} 0$/m);
    await db.pool.query('DELETE FROM arkvory_rule_overrides WHERE subject = $1', [user.principalId]);
  });

  it('lists overrides a bounded page at a time (route and CLI): the walk gives each once; a bad limit or forged cursor is 400', async () => {
    const service = await startRulesService();
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const N = 250;
    await db.pool.query(
      `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules)
       SELECT 'paged', CASE WHEN i % 3 = 0 THEN 'transfer_bytes' ELSE 'gateway_request' END,
              CASE WHEN i % 2 = 0 THEN 'principal' ELSE 'repository' END, 's-' || lpad(i::text, 4, '0'), '[]'::jsonb
         FROM generate_series(1, $1) i`,
      [N],
    );
    const expected = (
      await db.pool.query<{ k: string }>(
        `SELECT limiter || '/' || subject_kind || '/' || subject AS k FROM arkvory_rule_overrides
          WHERE service = 'paged' ORDER BY limiter, subject_kind, subject`,
      )
    ).rows.map((r) => r.k);
    expect(expected).toHaveLength(N);

    const first = (await (
      await fetch(`${service.url}/api/v1/admin/rule-overrides?service=paged`, { headers: bearer(admin.key) })
    ).json()) as { overrides: unknown[]; nextCursor: string | null };
    expect(first.overrides).toHaveLength(100); // the default page
    expect(first.nextCursor).toEqual(expect.any(String));
    const walked = await walkOverrides(service, admin.key, '/api/v1/admin/rule-overrides?service=paged&limit=7');
    expect(walked.largest).toBe(7);
    expect(walked.seen).toEqual(expected);
    const oneLimiter = await walkOverrides(
      service,
      admin.key,
      '/api/v1/admin/rule-overrides?service=paged&limiter=transfer_bytes&limit=9',
    );
    expect(oneLimiter.seen).toEqual(expected.filter((k) => k.startsWith('transfer_bytes/')));

    const forgedKey = Buffer.from(JSON.stringify(['paged', 'gateway_request'])).toString('base64url'); // wrong arity
    for (const query of ['limit=0', 'limit=1001', 'limit=ten', 'cursor=forged!', `cursor=${forgedKey}`]) {
      const res = await fetch(`${service.url}/api/v1/admin/rule-overrides?service=paged&${query}`, {
        headers: bearer(admin.key),
      });
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('invalid_request');
    }

    // The CLI pages the same way.
    const cliEnv = { ARKVORY_DATABASE_URL: db.url };
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const listed = await runCli(
        ['rules-service', 'list', '--service', 'paged', '--limit', '60', ...(cursor ? ['--cursor', cursor] : [])],
        cliEnv,
      );
      expect(listed.code, listed.stderr).toBe(0);
      const page = JSON.parse(listed.stdout) as {
        overrides: Array<{ limiter: string; subjectKind: string; subject: string }>;
        nextCursor: string | null;
      };
      expect(page.overrides.length).toBeLessThanOrEqual(60);
      seen.push(...page.overrides.map((o) => `${o.limiter}/${o.subjectKind}/${o.subject}`));
      cursor = page.nextCursor;
    } while (cursor);
    expect(seen).toEqual(expected);
    const refused = await runCli(['rules-service', 'list', '--service', 'paged', '--limit', '5000'], cliEnv);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--limit must be an integer from 1 to 1000 \(got 5000\)/);
    const forged = await runCli(['rules-service', 'list', '--cursor', 'forged!'], cliEnv);
    expect(forged.code).toBe(2);
    expect(forged.stderr).toMatch(/--cursor is not valid: no listing gave it/);
  });

  it('refuses an override that weakens a shipped default rule unless its publisher is a bypass publisher', async () => {
    const publisher = await createServiceAccount(db.pool, { name: 'overrides-bypasser', scopes: ['admin'] });
    const service = await startRulesService({ ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: 'overrides-bypasser' });
    const admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
    const user = await createServiceAccount(db.pool);
    const target = { service: 'guarded', limiter: 'gateway_request', kind: 'principal', subject: user.principalId };
    // The shipped default (available_limiters.yaml), which an override of the same name replaces.
    const shipped = {
      name: 'limit_requests_by_principal',
      action: 'limit',
      characteristics: ['principal'],
      limit: 12000,
      period_s: 60,
      match: { principal: { regex: '^[^<]' } },
    };
    const weaker: Array<[Record<string, unknown>, RegExp]> = [
      [{ ...shipped, action: 'log' }, /turns action limit into log/],
      [{ ...shipped, limit: 1_000_000 }, /raises limit from 12000 to 1000000/],
      [{ ...shipped, period_s: 1 }, /shortens period_s from 60 to 1/],
      [{ ...shipped, match: { principal: 'nobody' } }, /changes match/],
    ];
    const stored = async () =>
      (await db.pool.query(`SELECT rules FROM arkvory_rule_overrides WHERE service = 'guarded'`)).rows;
    for (const [rule, why] of weaker) {
      const res = await putOverride(service, admin.key, target, [capRule('harmless_cap', 50), rule]);
      expect(res.status, JSON.stringify(rule)).toBe(403);
      const body = (await res.json()) as { code: string; message: string };
      expect(body.code).toBe('forbidden');
      expect(body.message).toContain('rule "limit_requests_by_principal" weakens the default rule');
      expect(body.message).toMatch(why);
      expect(body.message).toContain('ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS');
      expect(await stored()).toEqual([]); // refused whole: the harmless rule beside it is not stored either
    }
    // As strict or stricter on every count: every admin's to set.
    expect((await putOverride(service, admin.key, target, [{ ...shipped, limit: 100, period_s: 600 }])).status).toBe(
      200,
    );
    // The named bypass publisher may weaken it (and add a skip).
    expect((await putOverride(service, publisher.key, target, [{ ...shipped, action: 'log' }])).status).toBe(200);
    expect((await putOverride(service, publisher.key, target, [{ name: 'vip', action: 'skip' }])).status).toBe(200);
    expect(await stored()).toMatchObject([{ rules: [{ name: 'vip', action: 'skip' }] }]);
  });
});

describe('rules service started before its PostgreSQL (a host boot, a failover)', () => {
  it('retries with backoff and serves once the database appears; gives up after ARKVORY_DATABASE_STARTUP_WAIT_SECONDS; a SIGTERM while waiting exits 0 at once', async () => {
    const toxiproxy = await startToxiproxy();
    try {
      // The database behind a real toxiproxy link, disabled: connections are refused.
      const link = await toxiproxy.proxyToUrl(db.url);
      const setEnabled = (enabled: boolean) =>
        link.proxy.update({ enabled, listen: link.proxy.listen, upstream: link.proxy.upstream });
      await setEnabled(false);
      const env = { ARKVORY_DATABASE_URL: link.through(db.url) };
      const [waiting, stopped, bounded] = await Promise.all([
        startRulesService(env, { waitFor: 'none' }),
        startRulesService(env, { waitFor: 'none' }),
        startRulesService({ ...env, ARKVORY_DATABASE_STARTUP_WAIT_SECONDS: '1' }, { waitFor: 'none' }),
      ]);

      // Asked to stop while it waits: it does not wait out its sleep (nor the 60 s bound).
      await untilRetried(stopped, 1);
      const signalledAt = performance.now();
      stopped.child.kill('SIGTERM');
      expect(await stopped.exited).toBe(0);
      expect(performance.now() - signalledAt).toBeLessThan(1500);
      const stoppedLines = logLines(stopped);
      const shutdownAt = stoppedLines.findIndex((l) => l.msg === 'shutting down');
      expect(shutdownAt).toBeGreaterThan(0);
      // At most the attempt already under way when the signal came.
      expect(
        stoppedLines.slice(shutdownAt).filter((l) => l.msg === 'PostgreSQL not reachable at startup; retrying').length,
      ).toBeLessThanOrEqual(1);
      expect(stoppedLines.some((l) => l.msg === 'listening')).toBe(false);

      // Past its bound (1 s: 0.25 s, 0.5 s, then what is left) it exits 1, naming the variable.
      expect(await bounded.exited).toBe(1);
      expect(
        retryLines(bounded)
          .map((l) => l.retryInMs)
          .slice(0, 2),
      ).toEqual([250, 500]);
      expect(bounded.logs()).toContain('ARKVORY_DATABASE_STARTUP_WAIT_SECONDS=1');
      expect(bounded.logs()).toContain('cannot start: PostgreSQL at');

      // The database appears: the waiting service starts at its next attempt and answers.
      await untilRetried(waiting, 2);
      await setEnabled(true);
      await untilServing(waiting);
      const retries = retryLines(waiting);
      expect(retries[0]).toMatchObject({
        level: 'warn',
        attempt: 1,
        retryInMs: 250,
        code: 'ECONNREFUSED',
        target: `${link.host}:${link.port}`,
      });
      expect(retries.map((l) => l.retryInMs).slice(0, 2)).toEqual([250, 500]);
      expect(logLines(waiting).find((l) => l.msg === 'PostgreSQL reachable; starting')).toMatchObject({
        attempts: retries.length + 1,
      });
      const query = await fetch(`${waiting.url}/api/v1/rules/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ service: 'late', limiter: 'gateway_request', identifier: {} }),
      });
      expect(await query.json()).toEqual({ rules: [], ttl_s: 1, varies_by: [] });
      expect(waiting.logs()).not.toContain(db.url);
      waiting.child.kill('SIGTERM');
      expect(await waiting.exited).toBe(0);
    } finally {
      await toxiproxy.stop();
    }
  });
});
