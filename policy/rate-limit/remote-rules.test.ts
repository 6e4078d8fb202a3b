/**
 * The Phase 3 layer's logic with an injected clock: the "service" here is the reference service's
 * own answer function (rule-overrides.ts answerFor) over an in-memory table, called in process, so
 * the cache, TTL, shapes, single flight and the circuit can be stepped exactly. The HTTP path and
 * the real service process are covered by proxy/rules-service/rules-service.int.test.ts.
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../clock.ts';
import { createCircuitBreaker } from './circuit-breaker.ts';
import type { Identifier } from './match.ts';
import { createRulesServiceMetrics, RULES_SERVICE_METRIC } from './metrics.ts';
import { createRemoteRules, RulesServiceError, shapeKey, type RulesTransport } from './remote-rules.ts';
import { retryAfterMsOf } from './rules-service-client.ts';
import { answerFor, validateOverride, type SubjectKind } from './rule-overrides.ts';
import { tieredRules, type TierSource } from './rule-tiers.ts';
import { validateRulesAnswer } from './rules-answer.ts';
import { defineRule, type AvailableLimiters, type RuleSpec } from './rules.ts';

const available: AvailableLimiters = new Map([
  ['gateway_request', { description: 'd', available_properties: ['principal', 'repository', 'ip'], default_rules: [] }],
  ['auth_failure', { description: 'd', available_properties: ['ip'], default_rules: [] }],
]);

const cap = (name: string, limit: number): RuleSpec => ({
  name,
  action: 'limit',
  characteristics: ['principal'],
  match: {},
  limit,
  period_s: 60,
});

/** The reference service's answer logic over a table (service, limiter, kind, subject) → rules. */
function inProcessService(ttlS: number) {
  const table = new Map<string, RuleSpec[]>();
  const queries: Array<{ service: string; limiter: string; identifier: Record<string, unknown> }> = [];
  let behaviour: 'answer' | 'timeout' | 'refuse' | 'garbage' | 'hang' = 'answer';
  const transport: RulesTransport = async (query, signal) => {
    queries.push(query);
    if (behaviour === 'refuse') throw new RulesServiceError('error', 'ECONNREFUSED');
    if (behaviour === 'garbage') return { rules: [{ name: 'X', action: 'nope' }], ttl_s: 1, varies_by: [] };
    if (behaviour === 'hang' || behaviour === 'timeout')
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted'))));
    const kinds = new Set<SubjectKind>();
    const matching = new Map<SubjectKind, RuleSpec[]>();
    for (const [key, rules] of table) {
      const [service, limiter, kind, subject] = key.split('|') as [string, string, SubjectKind, string];
      if (service !== query.service || limiter !== query.limiter) continue;
      kinds.add(kind);
      if (String(query.identifier[kind]) === subject) matching.set(kind, rules);
    }
    return answerFor(kinds, matching, ttlS);
  };
  return {
    transport,
    queries,
    set: (key: string, rules: RuleSpec[]) => table.set(key, rules),
    behave: (b: typeof behaviour) => (behaviour = b),
  };
}

function setup(options: { ttlS?: number; maxTtlMs?: number; timeoutMs?: number; maxBytes?: number } = {}) {
  const clock = new ManualClock();
  const service = inProcessService(options.ttlS ?? 30);
  const registry = new Registry();
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  const remote = createRemoteRules({
    serviceName: 'alpha',
    available,
    transport: service.transport,
    clock,
    log,
    metrics: createRulesServiceMetrics(registry),
    timeoutMs: options.timeoutMs ?? 20,
    maxTtlMs: options.maxTtlMs ?? 60_000,
    ...(options.maxBytes === undefined ? {} : { maxBytes: options.maxBytes }),
  });
  const count = async (result: string) => {
    const metric = (await registry.getSingleMetric(RULES_SERVICE_METRIC)!.get()).values;
    return metric.filter((v) => v.labels.result === result).reduce((n, v) => n + v.value, 0);
  };
  return { clock, service, remote, lines, count };
}

const names = (rules: readonly { name: string }[] | undefined) => rules?.map((r) => r.name);

describe('remote rules layer', () => {
  it('waits for the service on a miss, then answers synchronously from the cache keyed by the answer shape', async () => {
    const { service, remote, count } = setup();
    service.set('alpha|gateway_request|principal|p1', [cap('contract', 5)]);
    const first = remote.rulesFor('gateway_request', { principal: 'p1', ip: '10.0.0.1' });
    expect(first).toBeInstanceOf(Promise);
    expect(names(await first)).toEqual(['contract']);
    // Same principal, other ip: the answer varied by principal only → a synchronous hit.
    expect(names(remote.rulesFor('gateway_request', { principal: 'p1', ip: '10.9.9.9' }) as never)).toEqual([
      'contract',
    ]);
    // Another principal: a miss of its own (empty rules, cached too).
    expect(await remote.rulesFor('gateway_request', { principal: 'p2' })).toEqual([]);
    expect(remote.rulesFor('gateway_request', { principal: 'p2', ip: 'x' })).toEqual([]);
    expect(service.queries).toHaveLength(2);
    expect(service.queries[0]).toEqual({
      service: 'alpha',
      limiter: 'gateway_request',
      identifier: { principal: 'p1', ip: '10.0.0.1' },
    });
    expect(await count('hit')).toBe(2);
    expect(await count('miss')).toBe(2);
  });

  it('caches an answer that varies by nothing once for every identifier', async () => {
    const { service, remote } = setup();
    await remote.rulesFor('auth_failure', { ip: 'a' });
    expect(remote.rulesFor('auth_failure', { ip: 'b' })).toEqual([]);
    expect(service.queries).toHaveLength(1);
  });

  it('expires entries after min(ttl_s, max TTL); a change in the service shows at the next miss', async () => {
    const { clock, service, remote } = setup({ ttlS: 30, maxTtlMs: 10_000 });
    await remote.rulesFor('gateway_request', { principal: 'p1' });
    service.set('alpha|gateway_request|principal|p1', [cap('new_cap', 1)]);
    clock.advance(9_999);
    expect(remote.rulesFor('gateway_request', { principal: 'p1' })).toEqual([]);
    clock.advance(1);
    expect(names(await remote.rulesFor('gateway_request', { principal: 'p1' }))).toEqual(['new_cap']);
  });

  it('keeps cached answers within a byte budget, oldest out first: large answers per principal cannot fill 100 000 entries', async () => {
    const { service, remote } = setup({ maxBytes: 1024 * 1024 });
    const big = { ...cap('contract', 5), description: 'x'.repeat(100 * 1024) };
    for (let i = 0; i < 30; i++) {
      service.set(`alpha|gateway_request|principal|p${i}`, [big]);
      expect(names(await remote.rulesFor('gateway_request', { principal: `p${i}` }))).toEqual(['contract']);
    }
    expect(remote.status().entries).toBeLessThanOrEqual(10);
    expect(names(remote.rulesFor('gateway_request', { principal: 'p29' }) as never)).toEqual(['contract']);
    expect(remote.rulesFor('gateway_request', { principal: 'p0' })).toBeInstanceOf(Promise);
  });

  it('leaves a service that answered 503 with Retry-After alone for that long (at most a minute), in every limiter', async () => {
    const clock = new ManualClock();
    const registry = new Registry();
    let asked = 0;
    let retryAfterMs: number | undefined = 30_000;
    const remote = createRemoteRules({
      serviceName: 'alpha',
      available,
      transport: async () => {
        asked++;
        if (retryAfterMs !== undefined)
          throw new RulesServiceError('error', 'rules service answered 503', { retryAfterMs });
        return { rules: [], ttl_s: 0, varies_by: [] };
      },
      clock,
      log: pino({ level: 'silent' }),
      metrics: createRulesServiceMetrics(registry),
      timeoutMs: 20,
      maxTtlMs: 60_000,
    });
    expect(await remote.rulesFor('gateway_request', { principal: 'p1' })).toBeUndefined();
    expect(asked).toBe(1);
    expect(remote.status().circuit).toBe('open'); // one such answer is enough
    expect(remote.rulesFor('auth_failure', { ip: 'a' })).toBeUndefined();
    clock.advance(29_999); // past the 5 s the circuit would stay open on its own
    expect(remote.rulesFor('gateway_request', { principal: 'p2' })).toBeUndefined();
    expect(asked).toBe(1);
    clock.advance(1);
    retryAfterMs = 3_600_000; // an hour: kept to a minute
    expect(await remote.rulesFor('gateway_request', { principal: 'p2' })).toBeUndefined();
    expect(asked).toBe(2);
    clock.advance(59_999);
    expect(remote.rulesFor('gateway_request', { principal: 'p3' })).toBeUndefined();
    clock.advance(1);
    retryAfterMs = undefined;
    expect(await remote.rulesFor('gateway_request', { principal: 'p3' })).toEqual([]);
    expect(asked).toBe(3);
    expect(remote.status().circuit).toBe('closed');
  });

  it('reads Retry-After as delay-seconds or an HTTP-date', () => {
    const now = Date.parse('2026-12-06T09:00:00Z');
    expect(retryAfterMsOf('120', now)).toBe(120_000);
    expect(retryAfterMsOf([' 7 '], now)).toBe(7_000);
    expect(retryAfterMsOf('Sun, 06 Dec 2026 09:00:30 GMT', now)).toBe(30_000);
    expect(retryAfterMsOf('Sun, 06 Dec 2026 08:00:00 GMT', now)).toBe(0);
    for (const bad of [undefined, '', 'soon', '-5']) expect(retryAfterMsOf(bad, now)).toBeUndefined();
  });

  it('shares one request among concurrent misses of the same identifier', async () => {
    const { service, remote } = setup();
    const a = remote.rulesFor('gateway_request', { principal: 'p1' });
    const b = remote.rulesFor('gateway_request', { principal: 'p1' });
    await Promise.all([a, b]);
    expect(service.queries).toHaveLength(1);
  });

  it('scopes by the calling service name', async () => {
    const { service, remote } = setup();
    service.set('beta|gateway_request|principal|p1', [cap('beta_only', 1)]);
    expect(await remote.rulesFor('gateway_request', { principal: 'p1' })).toEqual([]);
  });

  it('fails open (undefined) on refusal, garbage and timeout; counts each; logs once per interval; opens the circuit', async () => {
    const { clock, service, remote, lines, count } = setup({ timeoutMs: 5 });
    service.behave('refuse');
    for (let i = 0; i < 3; i++)
      expect(await remote.rulesFor('gateway_request', { principal: `p${i}` })).toBeUndefined();
    expect(await count('error')).toBe(3);
    expect(remote.status().circuit).toBe('open');
    expect(remote.rulesFor('gateway_request', { principal: 'p9' })).toBeUndefined(); // synchronous: zero cost
    expect(await count('circuit_open')).toBe(1);
    expect(lines.filter((l) => l.msg === 'rules service answer unusable; local rate-limit rules apply')).toHaveLength(
      1,
    );

    clock.advance(5000); // half-open: one probe; garbage fails it and the circuit opens again
    service.behave('garbage');
    expect(await remote.rulesFor('gateway_request', { principal: 'p1' })).toBeUndefined();
    expect(await count('invalid')).toBe(1);
    expect(remote.status().circuit).toBe('open');

    clock.advance(10_000);
    service.behave('answer');
    expect(await remote.rulesFor('gateway_request', { principal: 'p1' })).toEqual([]);
    expect(remote.status().circuit).toBe('closed');
    expect(lines.some((l) => l.msg === 'rules service answering again')).toBe(true);

    clock.advance(30_000); // that answer varied by nothing: it covers p5 until it expires
    service.behave('hang'); // one timeout opens the circuit at once
    expect(await remote.rulesFor('gateway_request', { principal: 'p5' })).toBeUndefined();
    expect(await count('timeout')).toBe(1);
    expect(remote.status().circuit).toBe('open');
    const warned = lines.filter((l) => l.msg === 'rules service answer unusable; local rate-limit rules apply');
    expect(warned.at(-1)).toMatchObject({ result: 'timeout', suppressed: expect.any(Number) });
  });
});

describe('layered rules', () => {
  const local: TierSource = {
    name: 'local',
    rulesFor: () => [
      defineRule({ name: 'shared', action: 'limit', limit: 100, periodS: 60 }),
      defineRule({ name: 'local_only', action: 'skip' }),
    ],
  };
  it('puts the remote answer first and drops same-name local rules; async only when the remote layer asks', async () => {
    const remote: TierSource = {
      name: 'remote',
      rulesFor: (_l, id: Identifier) =>
        id.cold ? Promise.resolve([defineRule({ name: 'shared', action: 'limit', limit: 1, periodS: 60 })]) : undefined,
    };
    const rules = tieredRules('gateway_request', [remote, local]);
    const warm = rules({});
    expect(Array.isArray(warm) && warm.map((r) => r.name)).toEqual(['shared', 'local_only']);
    const cold = rules({ cold: true });
    expect(cold).toBeInstanceOf(Promise);
    const merged = await cold;
    expect(merged.map((r) => [r.name, r.limit])).toEqual([
      ['shared', 1],
      ['local_only', undefined],
    ]);
  });
});

describe('wire contract and breaker', () => {
  it('rejects answers outside the schema, naming every problem', () => {
    const { problems } = validateRulesAnswer(
      {
        rules: [{ name: 'a', action: 'limit', characteristics: ['colour'] }],
        ttl_s: -1,
        varies_by: ['colour'],
        extra: 1,
      },
      'gateway_request',
      available,
    );
    expect(problems.map((p) => p.message)).toEqual(
      expect.arrayContaining([
        'unknown field "extra"',
        'ttl_s must be an integer from 0 to 86400, got -1',
        '"colour" is not an available property of limiter "gateway_request"',
        'limit and log rules require limit and period_s',
      ]),
    );
    expect(validateRulesAnswer({ rules: [], ttl_s: 0, varies_by: [] }, 'gateway_request', available).answer).toEqual({
      rules: [],
      ttl_s: 0,
      varies_by: [],
    });
  });

  it('keys entries by the shape values only; a missing property is its own value', () => {
    expect(shapeKey('l', ['principal'], { principal: 'p', ip: 'x' })).toBe(
      shapeKey('l', ['principal'], { principal: 'p', ip: 'y' }),
    );
    expect(shapeKey('l', ['principal'], { principal: 'p' })).not.toBe(shapeKey('l', ['principal'], {}));
    expect(shapeKey('l', ['principal', 'repository'], { principal: 'a', repository: 'b' })).not.toBe(
      shapeKey('l', ['principal', 'repository'], { principal: 'a\0b' }),
    );
    expect(shapeKey('l', ['principal', 'repository'], { principal: 'a', repository: 'b\0c' })).not.toBe(
      shapeKey('l', ['principal', 'repository'], { principal: 'a\0b', repository: 'c' }),
    );
    expect(shapeKey('l', ['principal'], { principal: '-' })).not.toBe(shapeKey('l', ['principal'], {}));
  });

  it('refuses a limit rule in an override that does not count by its subject: its counter would be shared with other subjects', () => {
    const cap = (characteristics: string[], action = 'limit') => ({
      name: 'vip_cap',
      action,
      characteristics,
      limit: 10,
      period_s: 60,
    });
    const forKind = (subjectKind: string, rules: unknown[]) =>
      validateOverride(
        { service: 'alpha', limiter: 'gateway_request', subjectKind, subject: 's', rules },
        available,
      ).problems.map((p) => `${p.path.join('.')}: ${p.message}`);
    // One file set for two principals: without principal in its key, A's requests use up B's budget.
    expect(forKind('principal', [cap([])])).toEqual([
      'rules.0.characteristics: rule "vip_cap": a limit rule in a principal override must count by principal (add it to characteristics), or its counter is shared with every other principal whose override has a rule of this name',
    ]);
    expect(forKind('principal', [cap(['ip'])])).toHaveLength(1);
    expect(forKind('repository', [cap(['principal'])])).toHaveLength(1);
    expect(forKind('principal', [cap(['principal', 'ip'])])).toEqual([]);
    expect(forKind('repository', [cap(['repository'])])).toEqual([]);
    // log and skip rules block nothing.
    expect(forKind('principal', [cap([], 'log')])).toEqual([]);
  });

  it('an override holds at most 50 rules, so an answer joining a principal override and a repository one fits in 100', () => {
    const rules = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ name: `r${i}`, action: 'log', limit: 1, period_s: 1 }));
    const key = { service: 'alpha', limiter: 'gateway_request', subjectKind: 'principal', subject: 'p' };
    const ok = validateOverride({ ...key, rules: rules(50) }, available);
    expect(ok.problems).toEqual([]);
    const over = validateOverride({ ...key, rules: rules(51) }, available);
    expect(over.override).toBeUndefined();
    expect(over.problems.map((p) => `${p.path.join('.')}: ${p.message}`)).toEqual([
      'rules: at most 50 rules per override, got 51',
    ]);
    const both = answerFor(
      new Set<SubjectKind>(['principal', 'repository']),
      new Map([
        ['principal', ok.override!.rules],
        ['repository', ok.override!.rules.map((r) => ({ ...r, name: `${r.name}_repo` }))],
      ]),
      5,
    );
    expect(validateRulesAnswer(both, 'gateway_request', available).problems).toEqual([]);
  });

  it('answerFor: a principal rule beats a repository rule of the same name; varies_by lists kinds in use', () => {
    const answer = answerFor(
      new Set<SubjectKind>(['repository', 'principal']),
      new Map<SubjectKind, RuleSpec[]>([
        ['repository', [cap('x', 9), cap('repo_only', 3)]],
        ['principal', [cap('x', 1)]],
      ]),
      5,
    );
    expect(answer).toEqual({
      rules: [cap('x', 1), cap('repo_only', 3)],
      ttl_s: 5,
      varies_by: ['principal', 'repository'],
    });
  });

  const steps: Array<[string, (b: ReturnType<typeof createCircuitBreaker>) => unknown, unknown]> = [
    ['closed allows', (b) => b.allow(0), true],
    ['two failures stay closed', (b) => (b.failure(0), b.failure(0), b.state), 'closed'],
    ['the third opens', (b) => (b.failure(0), b.state), 'open'],
    ['open refuses before openMs', (b) => b.allow(999), false],
    ['then one probe', (b) => [b.allow(1000), b.allow(1000), b.state], [true, false, 'half_open']],
    ['a failed probe reopens', (b) => (b.failure(1000), b.allow(1500)), false],
    ['a good probe closes', (b) => (b.allow(2000), b.success(), b.state), 'closed'],
    ['a timeout opens at once', (b) => (b.failure(3000, true), b.state), 'open'],
  ];
  it('circuit breaker steps', () => {
    const breaker = createCircuitBreaker({ threshold: 3, openMs: 1000 });
    for (const [what, step, expected] of steps) expect(step(breaker), what).toEqual(expected);
  });
});
