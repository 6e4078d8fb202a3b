/**
 * Added latency of the Phase 3 rules service per `Limiter.check()`, in one run, three ways over the
 * same limiter (memory counters, the shipped `gateway_request` default rules as the local tier):
 *   - none:  no rules service (the baseline);
 *   - warm:  rules service configured, every identifier's answer already cached (a synchronous hit);
 *   - cold:  every check a new principal, so every check asks the reference service
 *            (`arkvory rules-service serve`, a real process on loopback, PostgreSQL behind it).
 * Sequential checks (concurrency 1), interleaved rounds; figures are medians over the rounds.
 *
 *   node bench/rules-service.ts [--database postgres://postgres@127.0.0.1:5432/postgres] [--rounds 5] [--checks 4000]
 *
 * A scratch database is created next to the one named (and dropped at the end). Target: warm adds
 * < 0.1 ms at p50.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { systemClock } from '../policy/clock.ts';
import { createLimiter, type Limiter } from '../policy/rate-limit/limiter.ts';
import { createMemoryCounterStore } from '../policy/rate-limit/memory-counter-store.ts';
import { createRulesServiceMetrics } from '../policy/rate-limit/metrics.ts';
import { createRemoteRules } from '../policy/rate-limit/remote-rules.ts';
import { tieredRules, type TierSource } from '../policy/rate-limit/rule-tiers.ts';
import { createRulesServiceClient } from '../policy/rate-limit/rules-service-client.ts';
import { ruleFromSpec } from '../policy/rate-limit/rules.ts';
import { parseAvailableLimiters } from '../policy/rate-limit/yaml-source.ts';
import { AVAILABLE_LIMITERS_FILE } from '../proxy/gates/rate-limit-rule-files.ts';
import { LOCAL_POSTGRES_URL, median } from './support.ts';
import { createDatabase, startGateway, STOP_GRACE_MS, type GatewayProcess } from '../test/harness/index.ts';

const { values } = parseArgs({
  options: {
    database: {
      type: 'string',
      default: process.env.ARKVORY_TEST_DATABASE_URL ?? LOCAL_POSTGRES_URL,
    },
    rounds: { type: 'string', default: '5' },
    checks: { type: 'string', default: '4000' },
  },
});
const rounds = Number(values.rounds);
const checks = Number(values.checks);
const log = pino({ level: 'silent' });

function quantiles(samples: number[]): { p50: number; p99: number } {
  const s = [...samples].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { p50: at(0.5), p99: at(0.99) };
}

async function timeChecks(
  limiter: Limiter,
  identifier: (i: number) => Record<string, string>,
  n: number,
): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const id = identifier(i);
    const started = performance.now();
    await limiter.check(id);
    out.push(performance.now() - started);
  }
  return out;
}

async function main(): Promise<void> {
  const db = await createDatabase(values.database, { prefix: 'bench', poolSize: 2 });
  const { pool, name } = db;
  let service: GatewayProcess | undefined;
  try {
    // Principal overrides exist, so answers vary by principal: a new principal is a cold miss.
    for (let i = 0; i < 50; i++) {
      await pool.query(
        `INSERT INTO arkvory_rule_overrides (service, limiter, subject_kind, subject, rules) VALUES ('arkvory', 'gateway_request', 'principal', $1, $2::jsonb)`,
        [
          `vip-${i}`,
          JSON.stringify([
            {
              name: 'contract_cap',
              action: 'limit',
              characteristics: ['principal'],
              match: {},
              limit: 1e9,
              period_s: 60,
            },
          ]),
        ],
      );
    }
    service = await startGateway({
      args: ['rules-service', 'serve'],
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'warn', ARKVORY_RULES_SERVICE_TTL_SECONDS: '300' },
      name: 'the rules service',
    });
    const serviceUrl = service.url;

    const { available } = parseAvailableLimiters(
      await readFile(AVAILABLE_LIMITERS_FILE, 'utf8'),
      'available_limiters.yaml',
    );
    const localRules = available.get('gateway_request')!.default_rules.map(ruleFromSpec);
    const local: TierSource = { name: 'local', rulesFor: () => localRules };
    const client = createRulesServiceClient({ url: serviceUrl, timeoutMs: 1000 });
    const remote = createRemoteRules({
      serviceName: 'arkvory',
      available,
      transport: client.transport,
      clock: systemClock,
      log,
      metrics: createRulesServiceMetrics(new Registry()),
      timeoutMs: 1000,
      maxTtlMs: 3_600_000,
      maxEntries: 1_000_000,
    });
    const deps = { store: createMemoryCounterStore(), clock: systemClock, log, timeoutMs: 1000 };
    const none = createLimiter(deps, { name: 'gateway_request', rules: tieredRules('gateway_request', [local]) });
    const withService = createLimiter(deps, {
      name: 'gateway_request',
      rules: tieredRules('gateway_request', [remote, local]),
    });

    const request = (principal: string, i: number) => ({
      principal,
      ip: `10.0.${(i >> 8) & 255}.${i & 255}`,
      method: 'GET',
      route: '/api/v1/repositories/:repo/artifacts/:id',
      repository: 'libs',
      request_type: 'read',
    });
    const warmPrincipals = 200;
    for (let i = 0; i < warmPrincipals; i++) await withService.check(request(i < 50 ? `vip-${i}` : `p-${i}`, i));
    // JIT warm-up of all three paths.
    await timeChecks(none, (i) => request(`p-${i % warmPrincipals}`, i), 2000);
    await timeChecks(
      withService,
      (i) => request(i % warmPrincipals < 50 ? `vip-${i % warmPrincipals}` : `p-${i % warmPrincipals}`, i),
      2000,
    );
    await timeChecks(withService, (i) => request(`warmup-${i}`, i), 300);

    const results = {
      none: [] as Array<{ p50: number; p99: number }>,
      warm: [] as Array<{ p50: number; p99: number }>,
      cold: [] as Array<{ p50: number; p99: number }>,
    };
    let coldSeq = 0;
    const coldChecks = Math.max(200, Math.floor(checks / 8));
    for (let r = 0; r < rounds; r++) {
      results.none.push(quantiles(await timeChecks(none, (i) => request(`p-${i % warmPrincipals}`, i), checks)));
      results.warm.push(
        quantiles(
          await timeChecks(
            withService,
            (i) => request(i % warmPrincipals < 50 ? `vip-${i % warmPrincipals}` : `p-${i % warmPrincipals}`, i),
            checks,
          ),
        ),
      );
      results.cold.push(quantiles(await timeChecks(withService, (i) => request(`cold-${coldSeq++}`, i), coldChecks)));
    }
    const status = remote.status();
    await client.close();

    const row = (label: string, xs: Array<{ p50: number; p99: number }>) => {
      const p50 = median(xs.map((x) => x.p50));
      const p99 = median(xs.map((x) => x.p99));
      const base50 = median(results.none.map((x) => x.p50));
      const base99 = median(results.none.map((x) => x.p99));
      return `| ${label} | ${(p50 * 1000).toFixed(1)} | ${(p99 * 1000).toFixed(1)} | ${((p50 - base50) * 1000).toFixed(1)} | ${((p99 - base99) * 1000).toFixed(1)} |`;
    };
    process.stdout.write(
      `node ${process.version}; ${rounds} rounds of ${checks} checks (cold: ${coldChecks}); medians over rounds; microseconds\n`,
    );
    process.stdout.write(
      `reference rules service on ${serviceUrl} (PostgreSQL ${name}); cache entries at the end: ${status.entries}, circuit ${status.circuit}\n\n`,
    );
    process.stdout.write(
      '| Limiter.check | p50 µs | p99 µs | added p50 µs | added p99 µs |\n| --- | --- | --- | --- | --- |\n',
    );
    process.stdout.write(
      `${row('no rules service (baseline)', results.none)}\n${row('rules service, warm cache', results.warm)}\n${row('rules service, cold cache (loopback query)', results.cold)}\n`,
    );
    const warmAdded = median(results.warm.map((x) => x.p50)) - median(results.none.map((x) => x.p50));
    process.stdout.write(
      `\nwarm added p50 ${(warmAdded * 1000).toFixed(1)} µs: ${warmAdded < 0.1 ? 'within' : 'OVER'} the 100 µs target\n`,
    );
  } finally {
    await service?.stop('SIGTERM', STOP_GRACE_MS);
    await db.drop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
