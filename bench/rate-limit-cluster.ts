import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { systemClock } from '../policy/clock.ts';
import { createLimiter, type Limiter } from '../policy/rate-limit/limiter.ts';
import { createRedisCounterStore } from '../policy/rate-limit/redis-counter-store.ts';
import { defineRule } from '../policy/rate-limit/rules.ts';
import { createRateLimitRedis, type RateLimitRedis } from '../proxy/gates/rate-limit-redis.ts';
import { startRedisCluster } from '../test/hosts/redis-cluster.ts';
import { median, percentile } from './support.ts';
import { startRedisServer } from '../test/harness/index.ts';

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
  const single = await startRedisServer();
  const cluster = await startRedisCluster();
  const clients: RateLimitRedis[] = [];
  try {
    const one = createRateLimitRedis(single.url, log, systemClock);
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
    await single.stop('SIGKILL');
    await cluster.stop();
  }
}

await main();
