/**
 * Throughput and added latency of `Limiter.check()` against a local Redis, at 1, 16 and 64
 * concurrent callers, side by side with rate-limiter-flexible's `RateLimiterRedis.consume` on the
 * same Redis (one ioredis client each, same options: auto-pipelining, no offline queue).
 *
 *   node bench/rate-limit.ts [--redis redis://127.0.0.1:6379] [--seconds 3] [--rules 1]
 *                            [--peer /path/containing/node_modules/rate-limiter-flexible]
 *
 * rate-limiter-flexible is not a dependency of the gateway: install it anywhere
 * (`npm i --prefix /tmp/rlf rate-limiter-flexible`) and pass --peer /tmp/rlf, or it is skipped.
 * Keys go under a random `arkvory:bench:` prefix and are deleted at the end.
 * Target: ≥ 20,000 checks/s per process, and at least the peer's throughput.
 */
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Cluster } from 'ioredis';
import { pino } from 'pino';
import { systemClock } from '../policy/clock.ts';
import { createLimiter } from '../policy/rate-limit/limiter.ts';
import { createRedisCounterStore } from '../policy/rate-limit/redis-counter-store.ts';
import { defineRule } from '../policy/rate-limit/rules.ts';
import { createRateLimitRedis, type RateLimitRedis } from '../proxy/gates/rate-limit-redis.ts';

const { values } = parseArgs({
  options: {
    redis: { type: 'string', default: process.env.ARKVORY_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379' },
    seconds: { type: 'string', default: '3' },
    rules: { type: 'string', default: '1' },
    peer: { type: 'string' },
  },
});
const seconds = Number(values.seconds);
const log = pino({ level: 'silent' });
const prefix = `arkvory:bench:${randomBytes(4).toString('hex')}:`;

interface Row {
  name: string;
  concurrency: number;
  checksPerSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
}

interface Sample {
  latencies: number[];
  errors: number;
  elapsedS: number;
}

async function runFor(
  sample: Sample,
  runSeconds: number,
  concurrency: number,
  op: (i: number) => Promise<boolean>,
): Promise<void> {
  const deadline = performance.now() + runSeconds * 1000;
  let counter = 0;
  const worker = async () => {
    while (performance.now() < deadline) {
      const i = counter++;
      const started = performance.now();
      const ok = await op(i);
      sample.latencies.push(performance.now() - started);
      if (!ok) sample.errors++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  sample.elapsedS += (performance.now() - started) / 1000;
}

function row(name: string, concurrency: number, sample: Sample): Row {
  const latencies = sample.latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? NaN;
  return {
    name,
    concurrency,
    checksPerSec: Math.round(latencies.length / sample.elapsedS),
    p50Ms: at(0.5),
    p99Ms: at(0.99),
    errors: sample.errors,
  };
}

async function cleanup(client: RateLimitRedis): Promise<void> {
  // A cluster is scanned node by node, and its keys are deleted one by one (different slots).
  for (const node of client instanceof Cluster ? client.nodes('master') : [client]) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length)
        await (client instanceof Cluster ? Promise.all(keys.map((k) => node.del(k))) : node.del(...keys));
    } while (cursor !== '0');
  }
}

async function main(): Promise<void> {
  const ours = createRateLimitRedis(values.redis, log, systemClock);
  const theirs = createRateLimitRedis(values.redis, log, systemClock);
  await ours.connect();
  await theirs.connect();
  const ruleCount = Number(values.rules);
  const rules = Array.from({ length: ruleCount }, (_, i) =>
    defineRule({ name: `per_ip_${i}`, action: 'limit', characteristics: ['ip'], limit: 1e12, periodS: 60 }),
  );
  const limiter = createLimiter(
    { store: createRedisCounterStore(ours), clock: systemClock, log, keyPrefix: `${prefix}ark:`, timeoutMs: 5000 },
    { name: 'bench', rules },
  );

  let peer: ((key: string) => Promise<unknown>) | undefined;
  if (values.peer) {
    const require = createRequire(path.join(path.resolve(values.peer), 'package.json'));
    const { RateLimiterRedis } = require('rate-limiter-flexible') as {
      RateLimiterRedis: new (opts: object) => { consume(key: string, points?: number): Promise<unknown> };
    };
    const rl = new RateLimiterRedis({ storeClient: theirs, points: 1e12, duration: 60, keyPrefix: `${prefix}rlf` });
    peer = (key) => rl.consume(key);
  }

  // Interleaved slices (ours, peer, ours, peer, …) so load from other processes hits both alike.
  const rows: Row[] = [];
  const slices = 6;
  for (const concurrency of [1, 16, 64]) {
    const mine: Sample = { latencies: [], errors: 0, elapsedS: 0 };
    const other: Sample = { latencies: [], errors: 0, elapsedS: 0 };
    const warm: Sample = { latencies: [], errors: 0, elapsedS: 0 };
    await runFor(
      warm,
      0.5,
      concurrency,
      async (i) => (await limiter.check({ ip: `w${i % 10000}` })).error === undefined,
    );
    if (peer) await runFor(warm, 0.5, concurrency, async (i) => (await peer(`w${i % 10000}`), true));
    for (let s = 0; s < slices; s++) {
      const ourSlice = () =>
        runFor(
          mine,
          seconds / slices,
          concurrency,
          async (i) => (await limiter.check({ ip: `10.${i % 10000}` })).error === undefined,
        );
      const peerSlice = () =>
        peer
          ? runFor(other, seconds / slices, concurrency, async (i) => (await peer(`10.${i % 10000}`), true))
          : Promise.resolve();
      // Alternate which goes first, so neither always runs right after the other.
      if (s % 2 === 0) await ourSlice().then(peerSlice);
      else await peerSlice().then(ourSlice);
    }
    rows.push(row(`arkvory Limiter.check (${ruleCount} rule)`, concurrency, mine));
    if (peer) rows.push(row('rate-limiter-flexible RateLimiterRedis.consume', concurrency, other));
  }
  await cleanup(ours);
  ours.disconnect();
  theirs.disconnect();

  process.stdout.write(`node ${process.version}, ${seconds} s per run, redis ${values.redis}\n\n`);
  process.stdout.write(
    '| implementation | concurrency | checks/s | p50 ms | p99 ms | errors |\n| --- | --- | --- | --- | --- | --- |\n',
  );
  for (const r of rows)
    process.stdout.write(
      `| ${r.name} | ${r.concurrency} | ${r.checksPerSec} | ${r.p50Ms.toFixed(3)} | ${r.p99Ms.toFixed(3)} | ${r.errors} |\n`,
    );
  if (!peer) process.stdout.write('\n(rate-limiter-flexible not measured: pass --peer DIR, see the header)\n');
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
