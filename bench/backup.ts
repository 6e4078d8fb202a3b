/**
 * Backup benchmark (issue 25): `arkvory backup` of a directory store against `cp -r` of its blobs/
 * directory, both onto another filesystem (so the backup really copies: read through the ArtifactStore, hash,
 * write, fsync), in interleaved rounds; then a second backup into the same destination, which reuses
 * every blob by hard link.
 *
 *   node_modules/.bin/node bench/backup.ts [--runs 3] [--blobs 32] [--blob-mib 4] [--destination /dev/shm]
 *
 * The gateway runs on the embedded default in a temp data dir (its own PostgreSQL); the blobs are
 * uploaded through it. Prints MiB/s medians, the ratio backup/cp, and the reuse backup's seconds.
 * Everything it creates is removed at the end.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import {
  freeLoopbackPort,
  makeTempDir,
  runCli,
  runProcess,
  STOP_GRACE_MS,
  type GatewayProcess,
  type ProcessResult,
} from '../test/harness/index.ts';
import { median, MiB, benchArgs, startEmbeddedGateway } from './support.ts';

const args = benchArgs({ runs: '3', blobs: '32', 'blob-mib': '4', destination: '/dev/shm' });
const RUNS = Number(args.runs);
const BLOBS = Number(args.blobs);
const BLOB_BYTES = Number(args['blob-mib']) * MiB;

/** Runs to the end, with the seconds it took. */
async function timed(result: Promise<ProcessResult>): Promise<ProcessResult & { seconds: number }> {
  const started = performance.now();
  return { ...(await result), seconds: (performance.now() - started) / 1000 };
}

function put(url: string, key: string, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { method: 'PUT', headers: { authorization: `Bearer ${key}`, 'content-length': body.length } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-backup-');
  const destinations = await mkdtemp(path.join(args.destination!, 'arkvory-bench-backup-'));
  const dataDir = path.join(work, 'data');
  const port = await freeLoopbackPort();
  const env = { ARKVORY_DATA_DIR: dataDir, ARKVORY_PORT: String(port), ARKVORY_LOG_LEVEL: 'warn' };
  let gateway: GatewayProcess | undefined;
  try {
    const started = await startEmbeddedGateway({ env, port, timeoutMs: 60_000 });
    gateway = started;
    const key = started.adminKey;
    for (const cmd of [
      ['repos', 'create', 'bench'],
      ['grants', 'add', 'admin', 'bench', 'write'],
    ]) {
      const r = await runCli(cmd, env);
      if (r.code !== 0) throw new Error(`${cmd.join(' ')}: ${r.stderr}`);
    }
    for (let i = 0; i < BLOBS; i++) {
      const status = await put(
        `${gateway.url}/api/v1/repositories/bench/artifacts/blob-${i}.bin`,
        key,
        randomBytes(BLOB_BYTES),
      );
      if (status !== 201) throw new Error(`upload ${i}: ${status}`);
    }
    const total = BLOBS * BLOB_BYTES;
    const backupMiBs: number[] = [];
    const cpMiBs: number[] = [];
    for (let round = 0; round < RUNS; round++) {
      // Alternate who goes first, so page-cache warmth and background load fall on both alike.
      const order = round % 2 === 0 ? ['backup', 'cp'] : ['cp', 'backup'];
      for (const which of order) {
        const dest = path.join(destinations, `${which}-${round}`);
        if (which === 'backup') {
          const r = await timed(runCli(['backup', dest], env));
          if (r.code !== 0) throw new Error(`backup: ${r.stderr}`);
          const summary = JSON.parse(r.stdout) as { blobs: { copied: number } };
          if (summary.blobs.copied !== BLOBS)
            throw new Error(`expected ${BLOBS} copied blobs, got ${JSON.stringify(summary.blobs)}`);
          backupMiBs.push(total / MiB / r.seconds);
        } else {
          const r = await timed(runProcess('cp', ['-r', path.join(dataDir, 'blobs'), dest]));
          if (r.code !== 0) throw new Error(`cp: ${r.stderr}`);
          cpMiBs.push(total / MiB / r.seconds);
        }
        if (!(which === 'backup' && round === RUNS - 1)) await rm(dest, { recursive: true, force: true });
      }
    }
    const reuse = await timed(runCli(['backup', path.join(destinations, `backup-${RUNS - 1}`)], env));
    const reused = JSON.parse(reuse.stdout) as { blobs: { reused: number } };
    const b = median(backupMiBs);
    const c = median(cpMiBs);
    process.stdout.write(
      `${JSON.stringify(
        {
          blobs: BLOBS,
          totalMiB: total / MiB,
          runs: RUNS,
          backupMiBPerSec: { median: +b.toFixed(1), all: backupMiBs.map((x) => +x.toFixed(1)) },
          cpMiBPerSec: { median: +c.toFixed(1), all: cpMiBs.map((x) => +x.toFixed(1)) },
          ratioBackupToCp: +(b / c).toFixed(2),
          reuseBackup: { seconds: +reuse.seconds.toFixed(2), reusedBlobs: reused.blobs.reused },
        },
        null,
        2,
      )}\n`,
    );
  } finally {
    await gateway?.stop('SIGTERM', STOP_GRACE_MS);
    await rm(destinations, { recursive: true, force: true });
    await rm(work, { recursive: true, force: true });
  }
}

await main();
