/**
 * Tenants on one budget over real HTTP (issue 40), one gateway on loopback with a download ceiling R:
 *
 * 1. Weighted split: three principals weighted 1:3:1, four streams each, download a big file for
 *    N seconds; each principal's share of the bytes received at the clients against its weight's
 *    share (20/60/20 %), per round and the median over rounds.
 * 2. Small requests beside a big throttled one: one principal's 4 KiB GETs (one keep-alive
 *    connection, 100 a second) for N seconds, with and without another principal saturating the
 *    ceiling with one download; rounds alternate the two, and the medians of each round's p50 and p99
 *    and their ratio are printed.
 *
 *   node bench/tenants-http.ts [--seconds 10] [--rounds 3] [--rate 4194304] [--small-per-second 100]
 *                              [--database-url postgres://…]
 *
 * R is low by default so that one download saturates it even on a loaded 2-core machine: the split
 * and the small requests are only meaningful while the ceiling, not the CPU, is the bottleneck.
 *
 * Without --database-url it runs an embedded PostgreSQL in a temporary directory.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import pino from 'pino';
import { AdminStore } from '../policy/auth/admin-store.ts';
import { startEmbeddedDatabase } from '../proxy/server/embedded-database.ts';
import {
  createDatabase,
  makeTempDir,
  seedWriters,
  startGateway,
  STOP_GRACE_MS,
  type GatewayProcess,
} from '../test/harness/index.ts';
import { benchArgs, MiB, median, percentile, streamLoop, writeUnreachedRequestRule } from './support.ts';

const args = benchArgs({ seconds: '10', rounds: '3', rate: String(4 * MiB), 'small-per-second': '100' }, [
  'database-url',
]);
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const RATE = Number(args.rate);
const SMALL_PER_SECOND = Number(args['small-per-second']);
const WEIGHTS = [1, 3, 1];
const STREAMS_PER_PRINCIPAL = 4;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * GETs of `url` on one keep-alive connection until `stopAt`, one each 1 / SMALL_PER_SECOND s (or
 * right after the previous one when it took longer): each one's milliseconds. Open loop, so the
 * small principal asks well below its fair share; a closed loop would ask for as much as it gets.
 */
async function smallLoop(url: string, key: string, stopAt: number): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const latencies: number[] = [];
  const intervalMs = 1000 / SMALL_PER_SECOND;
  let next = performance.now();
  try {
    while (performance.now() < stopAt) {
      await sleep(Math.max(0, next - performance.now()));
      next += intervalMs;
      const start = performance.now();
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.get(url, { headers: { authorization: `Bearer ${key}` }, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
        });
        req.on('error', reject);
      });
      if (status !== 200) throw new Error(`small GET answered ${status}`);
      latencies.push(performance.now() - start);
    }
  } finally {
    agent.destroy();
  }
  return latencies;
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-tenants-');
  let embedded: Awaited<ReturnType<typeof startEmbeddedDatabase>> | undefined;
  const adminUrl =
    args['database-url'] ??
    (embedded = await startEmbeddedDatabase(path.join(work, 'pg'), pino({ level: 'silent' }))).url;
  const db = await createDatabase(adminUrl, { prefix: 'bench', poolSize: 2 });
  let gateway: GatewayProcess | undefined;
  try {
    // bench-0..2 are weighted 1:3:1; bench-3 (weight 1) sends the small requests.
    const keys = await seedWriters(db.pool, 'bench', 4);
    const admin = new AdminStore(db.pool);
    for (const [i, weight] of WEIGHTS.entries()) await admin.setPrincipalWeight(`bench-${i}`, weight);
    gateway = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_DATA_DIR: path.join(work, 'data'),
        ARKVORY_LOG_LEVEL: 'warn',
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(RATE),
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '16',
        ARKVORY_RATE_LIMITS_FILE: await writeUnreachedRequestRule(work),
      },
    });
    const base = gateway.url;
    for (const [name, bytes] of [
      ['big.bin', 256 * MiB],
      ['small.bin', 4096],
    ] as const) {
      const put = await fetch(`${base}/api/v1/repositories/bench/artifacts/${name}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${keys[0]}` },
        body: randomBytes(bytes),
      });
      if (put.status !== 201) throw new Error(`upload of ${name} failed: ${put.status}`);
    }
    const big = `${base}/api/v1/repositories/bench/artifacts/big.bin/content`;
    const small = `${base}/api/v1/repositories/bench/artifacts/small.bin/content`;
    const refillFull = () => sleep(Math.ceil((Math.min(RATE / 10, MiB) / RATE) * 1000) + 300);

    console.log(
      `tenants over HTTP: R = ${RATE} B/s, one gateway, loopback, ${SECONDS} s per run, ${ROUNDS} rounds (interleaved)`,
    );
    const shares: number[][] = WEIGHTS.map(() => []);
    const p50: Record<'alone' | 'beside', number[]> = { alone: [], beside: [] };
    const p99: Record<'alone' | 'beside', number[]> = { alone: [], beside: [] };
    for (let round = 0; round < ROUNDS; round++) {
      // 1. Weighted split.
      await refillFull();
      const counters = WEIGHTS.map(() => ({ bytes: 0 }));
      const stopAt = performance.now() + SECONDS * 1000;
      await Promise.all(
        WEIGHTS.flatMap((_, p) =>
          Array.from({ length: STREAMS_PER_PRINCIPAL }, () => streamLoop(big, keys[p]!, stopAt, counters[p]!)),
        ),
      );
      const total = counters.reduce((sum, c) => sum + c.bytes, 0);
      const roundShares = counters.map((c) => c.bytes / total);
      for (const [p, s] of roundShares.entries()) shares[p]!.push(s);
      console.log(
        `round ${round + 1} split: ${roundShares.map((s) => `${(s * 100).toFixed(1)} %`).join(' / ')} of ${(total / MiB).toFixed(0)} MiB (${((total / (RATE * SECONDS)) * 100).toFixed(1)} % of R × t)`,
      );
      // 2. Small requests, alone and beside a big download, in alternating order.
      const order = round % 2 === 0 ? (['alone', 'beside'] as const) : (['beside', 'alone'] as const);
      for (const mode of order) {
        await refillFull();
        const stop = performance.now() + SECONDS * 1000;
        const bigCounter = { bytes: 0 };
        const bigLoop = mode === 'beside' ? streamLoop(big, keys[0]!, stop, bigCounter) : Promise.resolve();
        // Let the big download drain the burst before measuring.
        if (mode === 'beside') await sleep(500);
        const latencies = await smallLoop(small, keys[3]!, stop);
        await bigLoop;
        p50[mode].push(percentile(latencies, 50));
        p99[mode].push(percentile(latencies, 99));
        console.log(
          `round ${round + 1} small GETs ${mode.padEnd(6)}: ${latencies.length} requests, p50 ${percentile(latencies, 50).toFixed(2)} ms, p99 ${percentile(latencies, 99).toFixed(2)} ms${mode === 'beside' ? `, big download ${(bigCounter.bytes / MiB / SECONDS).toFixed(1)} MiB/s` : ''}`,
        );
      }
    }
    console.log('\nweighted split (medians over rounds):');
    console.log('| principal | weight | expected share | measured share | deviation |');
    console.log('| --- | --- | --- | --- | --- |');
    const weightSum = WEIGHTS.reduce((a, b) => a + b, 0);
    for (const [p, weight] of WEIGHTS.entries()) {
      const expected = weight / weightSum;
      const measured = median(shares[p]!);
      console.log(
        `| bench-${p} | ${weight} | ${(expected * 100).toFixed(1)} % | ${(measured * 100).toFixed(1)} % | ${((measured - expected) * 100).toFixed(1)} points |`,
      );
    }
    console.log('\n4 KiB GETs of one principal (medians over rounds):');
    console.log('| condition | p50 | p99 |');
    console.log('| --- | --- | --- |');
    for (const mode of ['alone', 'beside'] as const)
      console.log(
        `| ${mode === 'alone' ? 'no big transfer' : 'another principal saturating R'} | ${median(p50[mode]).toFixed(2)} ms | ${median(p99[mode]).toFixed(2)} ms |`,
      );
    console.log(`p99 ratio beside / alone: ${(median(p99.beside) / median(p99.alone)).toFixed(2)} (target ≤ 1.2)`);
  } finally {
    await gateway?.stop('SIGTERM', STOP_GRACE_MS);
    await db.drop();
    await embedded?.stop();
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
