/**
 * What a process's start costs: the CPU seconds a gateway (directory store, no Redis, the embedded
 * defaults otherwise) spends from spawn until `/health/status` answers 200, and the CPU seconds of
 * `arkvory --help` (the table of every command, nothing run) and of `arkvory keys --help` (one
 * command's start: its module alone, its help printed, nothing run).
 * A test run starts several hundred of each, and a worker or a restarted gateway pays the same.
 * With `--compare-root` the same starts of another checkout (the code before a change) run in the
 * same interleaved rounds, on the same database and data directory; medians and the ratio are printed.
 *
 *   node bench/startup.ts [--rounds 15] [--compare-root /other/checkout] [--database-url URL]
 */
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { ARKVORY_BIN, makeTempDir, REPO_ROOT } from '../test/harness/index.ts';
import { BenchRun, benchArgs, cpuSeconds, median, rotatedOrder } from './support.ts';

const args = benchArgs({ rounds: '15' }, ['compare-root', 'database-url']);
const ROUNDS = Number(args.rounds);

interface Contender {
  readonly name: string;
  readonly checkout: string;
  readonly gateway: number[];
  readonly help: number[];
  readonly command: number[];
}

/** User + system CPU seconds of one `arkvory <args>` of `checkout` (bash's `time`: the child's own rusage). */
async function cliCpuSeconds(checkout: string, ...cliArgs: string[]): Promise<number> {
  const bin = path.join(checkout, path.relative(REPO_ROOT, ARKVORY_BIN));
  const script = 'TIMEFORMAT="%3U %3S"; { time "$@" >/dev/null 2>&1; } 2>&1';
  const { stdout } = await promisify(execFile)('bash', ['-c', script, 'startup', process.execPath, bin, ...cliArgs], {
    env: process.env,
  });
  const [user, system] = stdout.trim().split(/\s+/).map(Number);
  return (user ?? Number.NaN) + (system ?? Number.NaN);
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-startup-');
  const run = await BenchRun.open(work, args['database-url']);
  const contenders: Contender[] = [{ name: 'this checkout', checkout: REPO_ROOT, gateway: [], help: [], command: [] }];
  if (args['compare-root'])
    contenders.push({
      name: 'compare',
      checkout: path.resolve(args['compare-root']),
      gateway: [],
      help: [],
      command: [],
    });
  try {
    const { url } = await run.seededDatabase();
    const dataDir = path.join(work, 'data');
    // One warm-up start each: Node's compile cache (NODE_COMPILE_CACHE, when set) is filled by the first.
    for (const c of contenders) {
      await (
        await run.gateway(c.name, { ARKVORY_DATA_DIR: dataDir }, { databaseUrl: url, checkout: c.checkout })
      ).stop();
      await cliCpuSeconds(c.checkout, '--help');
      await cliCpuSeconds(c.checkout, 'keys', '--help');
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const i of rotatedOrder(contenders.length, round)) {
        const c = contenders[i]!;
        const gateway = await run.gateway(
          c.name,
          { ARKVORY_DATA_DIR: dataDir },
          { databaseUrl: url, checkout: c.checkout },
        );
        c.gateway.push(await cpuSeconds(gateway.child.pid!));
        await gateway.stop();
        c.help.push(await cliCpuSeconds(c.checkout, '--help'));
        c.command.push(await cliCpuSeconds(c.checkout, 'keys', '--help'));
      }
    }
  } finally {
    await run.close();
    await rm(work, { recursive: true, force: true });
  }
  console.log(`bench/startup.ts: ${ROUNDS} interleaved rounds, CPU seconds (user + system), medians`);
  console.log('| checkout | gateway start to serving | arkvory --help | arkvory keys --help |');
  console.log('| --- | ---: | ---: | ---: |');
  for (const c of contenders)
    console.log(
      `| ${c.name} (${c.checkout}) | ${median(c.gateway).toFixed(2)} | ${median(c.help).toFixed(2)} | ${median(c.command).toFixed(2)} |`,
    );
  if (contenders.length === 2) {
    const [a, b] = contenders as [Contender, Contender];
    console.log(
      `this ÷ compare: gateway ${(median(a.gateway) / median(b.gateway)).toFixed(2)}, --help ${(median(a.help) / median(b.help)).toFixed(2)}, keys --help ${(median(a.command) / median(b.command)).toFixed(2)}`,
    );
  }
}

await main();
