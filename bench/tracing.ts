/**
 * What tracing costs a gateway (issue #41): 4 KiB downloads per second (wrk) and CPU seconds per GiB
 * downloaded (curl, one 1 GiB file), on three gateways that differ only in tracing: off, on at 100 %
 * sampling, on at 1 % (parentbased_traceidratio 0.01). The traced ones export with the SDK defaults
 * (OTEL_BSP_*) over OTLP/HTTP to a real Jaeger started here (test/harness/jaeger.ts), unless
 * `--collector URL` names another. Rounds are interleaved, the order rotating, and the table gives
 * medians and the ratios to "off" (req/s: traced ÷ off; CPU: off ÷ traced, so 1.00 = no cost and
 * both targets read "at least"): 100 % ≥ 0.9×, 1 % ≥ 0.98×.
 *
 * jaeger must be on PATH (scripts/test-tools.sh builds it into /root/.cache/arkvory-tools/bin):
 *
 *   PATH=/root/.cache/arkvory-tools/bin:$PATH node bench/tracing.ts [--rounds 5] [--seconds 4] [--connections 16] [--big-mib 1024] [--database-url URL] [--collector URL] [--compare-root DIR] [--profile-dir DIR]
 *
 * `--compare-root` adds the three gateways run from another checkout (the code before a change),
 * in the same interleaved rounds; their ratios are to that checkout's "off". `--profile-dir DIR`
 * runs every gateway with `--cpu-prof` into DIR (bench/cpu-profile-summary.ts; one file per gateway).
 */
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type JaegerServer, makeTempDir, startJaeger } from '../test/harness/index.ts';
import {
  BenchRun,
  benchArgs,
  cpuSeconds,
  curl,
  median,
  MiB,
  putFile,
  writeRandomFile,
  writeUnreachedRequestRule,
  wrk,
  rotatedOrder,
} from './support.ts';

const args = benchArgs({ rounds: '5', seconds: '4', connections: '16', 'big-mib': '1024' }, [
  'database-url',
  'collector',
  'compare-root',
  'profile-dir',
]);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const CONNECTIONS = Number(args.connections);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const SMALL_BYTES = 4096;
const GiB = 1024 * MiB;

interface Variant {
  readonly name: string;
  readonly target: number | undefined;
  readonly env: Record<string, string>;
  /** Another checkout's gateway (`--compare-root`); this one's when undefined. */
  readonly checkout?: string | undefined;
  /** The index of the "off" variant this one's ratios are to. */
  readonly off: number;
}

interface Figures {
  rps: number[];
  /** Gateway CPU seconds per 10,000 4 KiB requests: less swayed than req/s by what else the machine runs. */
  cpuPer10k: number[];
  cpuPerGiB: number[];
  errors: number;
}

/** `arkvory_trace_spans_*` of a gateway: exported, dropped (both reasons). */
async function spanCounts(base: string): Promise<{ exported: number; dropped: number }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const sum = (pattern: RegExp) => [...text.matchAll(pattern)].reduce((n, m) => n + Number(m[1]), 0);
  return {
    exported: sum(/^arkvory_trace_spans_exported_total (\S+)$/gm),
    dropped: sum(/^arkvory_trace_spans_dropped_total\{[^}]*\} (\S+)$/gm),
  };
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-tracing-');
  const bench = await BenchRun.open(work, args['database-url']);
  let jaeger: JaegerServer | undefined;
  try {
    const collector = args.collector ?? (jaeger = bench.keep(await startJaeger())).otlpUrl;
    const bigFile = path.join(work, 'big.bin');
    await writeRandomFile(bigFile, BIG_BYTES);
    const smallFile = path.join(work, 'small.bin');
    await writeFile(smallFile, randomBytes(SMALL_BYTES));
    // Counted on every request, as in production, never reached (the default rule would cut wrk short).
    const rules = await writeUnreachedRequestRule(work);
    const traced = { OTEL_EXPORTER_OTLP_ENDPOINT: collector };
    const kinds = [
      { name: 'off', target: undefined, env: {} },
      { name: '100 %', target: 0.9, env: { ...traced, OTEL_SERVICE_NAME: 'bench-100' } },
      {
        name: '1 %',
        target: 0.98,
        env: {
          ...traced,
          OTEL_SERVICE_NAME: 'bench-1',
          OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
          OTEL_TRACES_SAMPLER_ARG: '0.01',
        },
      },
    ];
    const checkouts: Array<[string, string | undefined]> = [['', undefined]];
    if (args['compare-root']) checkouts.push([' (compare)', args['compare-root']]);
    const variants: Variant[] = checkouts.flatMap(([suffix, checkout], c) =>
      kinds.map((k) => ({ ...k, name: `${k.name}${suffix}`, checkout, off: c * kinds.length })),
    );
    const gateways = [];
    for (const [i, v] of variants.entries())
      gateways.push(
        await bench.gateway(
          `gateway (tracing ${v.name})`,
          {
            ARKVORY_DATA_DIR: path.join(work, `data-${i}`),
            ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
            ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(CONNECTIONS * 2),
            ARKVORY_RATE_LIMITS_FILE: rules,
            ...(args['profile-dir'] ? { NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${args['profile-dir']}` } : {}),
            ...v.env,
          },
          v.checkout ? { checkout: v.checkout } : {},
        ),
      );
    const url = (base: string, name: string) => `${base}/api/v1/repositories/bench/artifacts/${name}/content`;
    for (const g of gateways) {
      const headers = { authorization: `Bearer ${g.keys[0]}` };
      for (const [name, file] of [
        ['big.bin', bigFile],
        ['small.bin', smallFile],
      ] as const) {
        const { status } = await putFile(`${g.url}/api/v1/repositories/bench/artifacts/${name}`, file, headers);
        if (status !== 201) throw new Error(`upload of ${name} answered ${status}`);
      }
      // Warm: JIT, the open-file cache, the page cache.
      await curl(url(g.url, 'big.bin'), headers);
      await wrk(url(g.url, 'small.bin'), { connections: CONNECTIONS, seconds: 1, headers });
    }
    const figures: Figures[] = variants.map(() => ({ rps: [], cpuPer10k: [], cpuPerGiB: [], errors: 0 }));
    for (let round = 0; round < ROUNDS; round++) {
      for (const i of rotatedOrder(variants.length, round)) {
        const g = gateways[i]!;
        const f = figures[i]!;
        const headers = { authorization: `Bearer ${g.keys[0]}` };
        const smallBefore = await cpuSeconds(g.child.pid!);
        const s = await wrk(url(g.url, 'small.bin'), { connections: CONNECTIONS, seconds: SECONDS, headers });
        f.rps.push(s.rps);
        f.cpuPer10k.push((((await cpuSeconds(g.child.pid!)) - smallBefore) / Math.max(1, s.requests)) * 10_000);
        f.errors += s.errors;
        const before = await cpuSeconds(g.child.pid!);
        const b = await curl(url(g.url, 'big.bin'), headers);
        if (b.status !== 200 || b.bytes !== BIG_BYTES)
          throw new Error(`${variants[i]!.name}: big download got ${b.status} with ${b.bytes} bytes`);
        f.cpuPerGiB.push(((await cpuSeconds(g.child.pid!)) - before) * (GiB / BIG_BYTES));
      }
      process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
    }

    const baseOf = (v: Variant) => ({
      rps: median(figures[v.off]!.rps),
      cpu10k: median(figures[v.off]!.cpuPer10k),
      cpu: median(figures[v.off]!.cpuPerGiB),
    });
    const load = os.loadavg().map((l) => l.toFixed(1));
    console.log(
      `\ntracing cost, ${ROUNDS} interleaved rounds, medians; wrk ${CONNECTIONS} connections × ${SECONDS} s on ${SMALL_BYTES / 1024} KiB; curl of ${BIG_BYTES / MiB} MiB; collector ${jaeger ? 'Jaeger (local)' : collector}; load average ${load.join(' ')} (${os.cpus().length} cores)\n`,
    );
    console.log(
      '| tracing | 4 KiB req/s | × off | CPU s per 10k 4 KiB | × off (off ÷ this) | CPU s per GiB | × off (off ÷ this) | target | spans exported / dropped | errors |',
    );
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const [i, v] of variants.entries()) {
      const f = figures[i]!;
      const base = baseOf(v);
      const rps = median(f.rps);
      const cpu = median(f.cpuPerGiB);
      const cpu10k = median(f.cpuPer10k);
      const cpu10kRatio = base.cpu10k / cpu10k;
      const spans = v.target === undefined ? '—' : await spanCounts(gateways[i]!.url);
      const rpsRatio = rps / base.rps;
      const cpuRatio = base.cpu / cpu;
      const verdict =
        v.target === undefined
          ? '—'
          : `≥ ${v.target}×: ${rpsRatio >= v.target && cpuRatio >= v.target ? 'met' : 'not met'}`;
      console.log(
        `| ${v.name} | ${rps.toFixed(0)} | ${rpsRatio.toFixed(2)} | ${cpu10k.toFixed(2)} | ${cpu10kRatio.toFixed(2)} | ${cpu.toFixed(3)} | ${cpuRatio.toFixed(2)} | ${verdict} | ${typeof spans === 'string' ? spans : `${spans.exported} / ${spans.dropped}`} | ${f.errors} |`,
      );
    }
    console.log(
      `\nper round (req/s): ${variants.map((v, i) => `${v.name} ${figures[i]!.rps.map((r) => r.toFixed(0)).join(', ')}`).join('; ')}`,
    );
    console.log(
      `per round (CPU s per 10k): ${variants.map((v, i) => `${v.name} ${figures[i]!.cpuPer10k.map((c) => c.toFixed(2)).join(', ')}`).join('; ')}`,
    );
    console.log(
      `per round (CPU s/GiB): ${variants.map((v, i) => `${v.name} ${figures[i]!.cpuPerGiB.map((c) => c.toFixed(3)).join(', ')}`).join('; ')}`,
    );
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
