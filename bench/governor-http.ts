/**
 * The governor over real HTTP (issue 5): one gateway with a download ceiling R, 1/16/64 streams
 * over 1/4/16 principals, each run N seconds. Prints achieved/R (with the burst allowance), the
 * largest excess of received bytes over R × t + burst seen at any 100 ms sample, Jain's fairness
 * index across the principals, and the gateway's CPU time per GiB served.
 *
 *   node bench/governor-http.ts [--seconds 10] [--rate 67108864] [--database postgres://…]
 *
 * Needs a PostgreSQL where it may create a database (default: the local one, trust auth).
 */
import { randomBytes } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { burstBytes } from '../policy/bandwidth/index.ts';
import { jainIndex } from './governor.ts';
import {
  createDatabase,
  makeTempDir,
  seedWriters,
  startGateway,
  STOP_GRACE_MS,
  type GatewayProcess,
} from '../test/harness/index.ts';
import { LOCAL_POSTGRES_URL, MiB, streamLoop } from './support.ts';

async function cpuMs(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '10' },
      rate: { type: 'string', default: String(64 * MiB) },
      database: { type: 'string', default: LOCAL_POSTGRES_URL },
    },
  });
  const seconds = Number(values.seconds);
  const rate = Number(values.rate);
  const burst = burstBytes(rate);
  const db = await createDatabase(values.database, { prefix: 'bench', poolSize: 2 });
  const dataDir = await makeTempDir('arkvory-govbench-');
  let gateway: GatewayProcess | undefined;
  try {
    const keys = await seedWriters(db.pool, 'bench', 16);
    gateway = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_DATA_DIR: dataDir,
        ARKVORY_LOG_LEVEL: 'warn',
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(rate),
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '64',
      },
    });
    const { child, url: base } = gateway;
    // Big enough that no stream finishes a copy within a run at R = 64 MiB/s.
    const file = randomBytes(256 * MiB);
    const put = await fetch(`${base}/api/v1/repositories/bench/artifacts/f.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${keys[0]}` },
      body: file,
    });
    if (put.status !== 201) throw new Error(`upload failed: ${put.status}`);
    const url = `${base}/api/v1/repositories/bench/artifacts/f.bin/content`;
    console.log(`governor over HTTP: R = ${rate} B/s (burst ${burst} B), ${seconds} s per run, one gateway, loopback`);
    for (const streams of [1, 16, 64]) {
      for (const principals of [1, 4, 16]) {
        if (principals > streams) continue;
        // Start each run from a full bucket: idle a burst's worth of time first.
        await sleep(Math.ceil((burst / rate) * 1000) + 200);
        const counters = Array.from({ length: principals }, () => ({ bytes: 0 }));
        const cpuBefore = await cpuMs(child.pid!);
        const start = performance.now();
        const stopAt = start + seconds * 1000;
        const loops = Array.from({ length: streams }, (_, s) =>
          streamLoop(url, keys[s % principals]!, stopAt, counters[s % principals]!),
        );
        let maxExcess = Number.NEGATIVE_INFINITY;
        while (performance.now() < stopAt) {
          await sleep(100);
          const t = (performance.now() - start) / 1000;
          const total = counters.reduce((sum, c) => sum + c.bytes, 0);
          maxExcess = Math.max(maxExcess, total - (rate * t + burst));
        }
        await Promise.all(loops);
        const elapsed = (performance.now() - start) / 1000;
        const total = counters.reduce((sum, c) => sum + c.bytes, 0);
        const cpu = (await cpuMs(child.pid!)) - cpuBefore;
        console.log(
          [
            `${String(streams).padStart(3)} streams / ${String(principals).padStart(2)} principals`,
            `achieved/R ${(total / (rate * elapsed)).toFixed(4)} (+burst ${(burst / (rate * elapsed)).toFixed(4)})`,
            `max excess ${maxExcess <= 0 ? '0' : maxExcess.toFixed(0)} B`,
            `Jain ${jainIndex(counters.map((c) => c.bytes)).toFixed(4)}`,
            `gateway CPU ${(cpu / (total / 2 ** 30)).toFixed(0)} ms/GiB`,
          ].join('  '),
        );
      }
    }
  } finally {
    await gateway?.stop('SIGTERM', STOP_GRACE_MS);
    await db.drop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
