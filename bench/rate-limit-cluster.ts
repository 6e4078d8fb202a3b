/**
 * What Redis Cluster costs a gateway's rate-limit checks: `Limiter.check()` on one redis-server
 * (the baseline) and on a 3-primary + 3-replica cluster, both started here on loopback, with 1 and
 * 3 counting rules, at 16 concurrent callers. Rounds are interleaved (single, cluster, cluster,
 * single, …) so load from other processes hits both alike; medians over the rounds, and the ratio.
 *
 *   node bench/rate-limit-cluster.ts [--rounds 5] [--seconds 1] [--concurrency 16]
 *
 * On a cluster every counting rule is its own script call (docs/rate-limits.md, "Redis Cluster"),
 * and the one-call batching of plain checks is off, so the ratio falls with the rule count.
 */
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { systemClock } from '../policy/clock.ts';
import { createLimiter, type Limiter } from '../policy/rate-limit/limiter.ts';
import { createRedisCounterStore } from '../policy/rate-limit/redis-counter-store.ts';
import { defineRule } from '../policy/rate-limit/rules.ts';
import { createRateLimitRedis, type RateLimitRedis } from '../proxy/gates/rate-limit-redis.ts';
import { startRedisCluster } from '../test/hosts/redis-cluster.ts';
import { median, percentile } from './support.ts';
import { freeLoopbackPort } from '../test/harness/index.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '16' },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const concurrency = Number(values.concurrency);
const log = pino({ level: 'silent' });

function limiterOn(redis: RateLimitRedis, ruleCount: number): Limiter {
  const rules = Array.from({ length: ruleCount }, (_, i) =>
    defineRule({ name: `bench_${i}`, action: 'limit', characteristics: ['ip'], limit: 1e12, periodS: 60 }),
  );
  return createLimiter(
    {
      store: createRedisCounterStore(redis),
      clock: systemClock,
      log,
      keyPrefix: 'arkvory:bench:cluster:',
      timeoutMs: 5000,
    },
    { name: 'bench', rules },
  );
}

/** Checks per second and per-check latencies (ms) of `concurrency` callers for `seconds`. */
async function slice(limiter: Limiter): Promise<{ perSecond: number; latencies: number[]; errors: number }> {
  const latencies: number[] = [];
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, w) => {
      for (let i = 0; performance.now() < until; i++) {
        const t = performance.now();
        const r = await limiter.check({ ip: `10.${w}.${i % 1000}` });
        latencies.push(performance.now() - t);
        if (r.error) errors++;
      }
    }),
  );
  return { perSecond: latencies.length / ((performance.now() - started) / 1000), latencies, errors };
}

async function main(): Promise<void> {
  const port = await freeLoopbackPort();
  const single = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const cluster = await startRedisCluster();
  const clients: RateLimitRedis[] = [];
  try {
    await new Promise((r) => setTimeout(r, 300));
    const one = createRateLimitRedis(`redis://127.0.0.1:${port}`, log, systemClock);
    const many = createRateLimitRedis(cluster.url, log, systemClock);
    clients.push(one, many);
    await one.connect();
    await many.connect();
    process.stdout.write(
      `node ${process.version}, ${rounds} interleaved rounds of ${seconds} s, ${concurrency} concurrent callers\n\n`,
    );
    process.stdout.write(
      '| rules | target | checks/s (median) | p50 ms | p99 ms | errors | vs single |\n| --- | --- | --- | --- | --- | --- | --- |\n',
    );
    for (const ruleCount of [1, 3]) {
      const targets = [
        {
          name: 'one redis-server',
          limiter: limiterOn(one, ruleCount),
          rates: [] as number[],
          latencies: [] as number[],
          errors: 0,
        },
        {
          name: 'cluster 3+3',
          limiter: limiterOn(many, ruleCount),
          rates: [] as number[],
          latencies: [] as number[],
          errors: 0,
        },
      ];
      for (const t of targets) await slice(t.limiter); // warm-up: scripts loaded, connections open
      for (let r = 0; r < rounds; r++) {
        for (const t of r % 2 === 0 ? targets : [...targets].reverse()) {
          const s = await slice(t.limiter);
          t.rates.push(s.perSecond);
          t.latencies.push(...s.latencies);
          t.errors += s.errors;
        }
      }
      const base = median(targets[0]!.rates);
      for (const t of targets) {
        const rate = median(t.rates);
        process.stdout.write(
          `| ${ruleCount} | ${t.name} | ${Math.round(rate)} | ${percentile(t.latencies, 50).toFixed(2)} | ${percentile(t.latencies, 99).toFixed(2)} | ${t.errors} | ${(rate / base).toFixed(2)} |\n`,
        );
      }
    }
  } finally {
    for (const c of clients) c.disconnect();
    single.kill('SIGKILL');
    await cluster.stop();
  }
}

await main();
