/**
 * What usage statistics cost a gateway (issue #41): 4 KiB downloads per second (wrk) and the
 * gateway's CPU seconds per 10,000 of them, on two gateways that differ only in
 * `ARKVORY_USAGE_STATS` (1, the default, against 0), each on a database of its own. With statistics
 * on, every response is tallied in memory and the tally flushed to PostgreSQL every
 * `--flush-seconds` (default 10, the shipped default), so the flushes fall inside the measured
 * rounds as they would in production. Rounds are interleaved, the order alternating; the table
 * gives medians and the ratios to "off" (req/s: on ÷ off; CPU: off ÷ on, so 1.00 = no cost).
 * The issue's target: ≥ 0.98× on 4 KiB req/s.
 *
 *   node bench/usage-stats.ts [--rounds 7] [--seconds 4] [--connections 16] [--flush-seconds 10] [--database-url URL]
 */
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { makeTempDir } from '../test/harness/index.ts';
import {
  BenchRun,
  benchArgs,
  cpuSeconds,
  median,
  putFile,
  rotatedOrder,
  writeUnreachedRequestRule,
  wrk,
} from './support.ts';

const args = benchArgs({ rounds: '7', seconds: '4', connections: '16', 'flush-seconds': '10' }, ['database-url']);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const CONNECTIONS = Number(args.connections);
const SMALL_BYTES = 4096;
const TARGET = 0.98;

interface Figures {
  rps: number[];
  /** Gateway CPU seconds per 10,000 requests: less swayed than req/s by what else the machine runs. */
  cpuPer10k: number[];
  requests: number;
  errors: number;
}

/** The downloads the gateway's database holds for the file, once the gateway has flushed. */
async function countedDownloads(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>(
      `SELECT coalesce(sum(downloads), 0)::text AS n FROM arkvory_usage_artifacts WHERE name = 'small.bin'`,
    );
    return Number(rows[0]!.n);
  } finally {
    await client.end();
  }
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-usage-');
  const bench = await BenchRun.open(work, args['database-url']);
  try {
    const smallFile = path.join(work, 'small.bin');
    await writeFile(smallFile, randomBytes(SMALL_BYTES));
    // Counted on every request, as in production, never reached (the default rule would cut wrk short).
    const rules = await writeUnreachedRequestRule(work);
    const variants = [
      { name: 'off', env: { ARKVORY_USAGE_STATS: '0' } },
      { name: 'on', env: { ARKVORY_USAGE_STATS: '1', ARKVORY_USAGE_STATS_FLUSH_SECONDS: args['flush-seconds']! } },
    ] as const;
    const gateways = [];
    const databases = [];
    for (const [i, v] of variants.entries()) {
      const db = await bench.seededDatabase();
      databases.push(db.url);
      const gateway = await bench.gateway(
        `gateway (statistics ${v.name})`,
        {
          ARKVORY_DATA_DIR: path.join(work, `data-${i}`),
          ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CONNECTIONS * 2),
          ARKVORY_RATE_LIMITS_FILE: rules,
          ...v.env,
        },
        { databaseUrl: db.url },
      );
      gateways.push(Object.assign(gateway, { keys: db.keys }));
    }
    const url = (base: string) => `${base}/api/v1/repositories/bench/artifacts/small.bin/content`;
    for (const g of gateways) {
      const headers = { authorization: `Bearer ${g.keys[0]}` };
      const { status } = await putFile(`${g.url}/api/v1/repositories/bench/artifacts/small.bin`, smallFile, headers);
      if (status !== 201) throw new Error(`upload of small.bin answered ${status}`);
      // Warm: JIT, the open-file cache, the page cache.
      await wrk(url(g.url), { connections: CONNECTIONS, seconds: 1, headers });
    }
    const figures: Figures[] = variants.map(() => ({ rps: [], cpuPer10k: [], requests: 0, errors: 0 }));
    for (let round = 0; round < ROUNDS; round++) {
      for (const i of rotatedOrder(variants.length, round)) {
        const g = gateways[i]!;
        const f = figures[i]!;
        const headers = { authorization: `Bearer ${g.keys[0]}` };
        const before = await cpuSeconds(g.child.pid!);
        const s = await wrk(url(g.url), { connections: CONNECTIONS, seconds: SECONDS, headers });
        f.rps.push(s.rps);
        f.cpuPer10k.push((((await cpuSeconds(g.child.pid!)) - before) / Math.max(1, s.requests)) * 10_000);
        f.requests += s.requests;
        f.errors += s.errors;
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
    }
    // The "on" gateway counted what it served: a graceful stop flushes the rest (docs/observability.md).
    await gateways[1]!.stop('SIGTERM');
    const counted = await countedDownloads(databases[1]!);

    const base = { rps: median(figures[0]!.rps), cpu10k: median(figures[0]!.cpuPer10k) };
    const load = os.loadavg().map((l) => l.toFixed(1));
    console.log(
      `\nusage statistics cost, ${ROUNDS} interleaved rounds, medians; wrk ${CONNECTIONS} connections × ${SECONDS} s on ${SMALL_BYTES / 1024} KiB; flush every ${args['flush-seconds']} s; load average ${load.join(' ')} (${os.cpus().length} cores)\n`,
    );
    console.log('| statistics | 4 KiB req/s | × off | CPU s per 10k 4 KiB | × off (off ÷ this) | target | errors |');
    console.log('| --- | --- | --- | --- | --- | --- | --- |');
    for (const [i, v] of variants.entries()) {
      const f = figures[i]!;
      const rps = median(f.rps);
      const cpu10k = median(f.cpuPer10k);
      const rpsRatio = rps / base.rps;
      const verdict = i === 0 ? '—' : `≥ ${TARGET}×: ${rpsRatio >= TARGET ? 'met' : 'not met'}`;
      console.log(
        `| ${v.name} | ${rps.toFixed(0)} | ${rpsRatio.toFixed(2)} | ${cpu10k.toFixed(2)} | ${(base.cpu10k / cpu10k).toFixed(2)} | ${verdict} | ${f.errors} |`,
      );
    }
    console.log(
      `\nper round (req/s): ${variants.map((v, i) => `${v.name} ${figures[i]!.rps.map((r) => r.toFixed(0)).join(', ')}`).join('; ')}`,
    );
    console.log(
      `per round (CPU s per 10k): ${variants.map((v, i) => `${v.name} ${figures[i]!.cpuPer10k.map((c) => c.toFixed(2)).join(', ')}`).join('; ')}`,
    );
    console.log(
      `downloads counted by "on" after its stop: ${counted} (wrk reported ${figures[1]!.requests} in the rounds, plus the 1 s warm-up)`,
    );
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
