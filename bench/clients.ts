/**
 * Client benchmark (issue 26), one gateway (embedded PostgreSQL, temporary data dir) in one run:
 *
 * 1. Large download: curl (the baseline) vs the SDK's resuming `download()` in this process vs the
 *    `arkvory get` CLI, whole file to disk, in interleaved rounds; MiB/s medians and ratios to curl.
 *    The SDK also hashes the whole file before it takes its final name; curl does not.
 * 2. Small requests: GET of a 4 KiB object through Bearer (the baseline), Basic and a pre-signed
 *    link, over keep-alive connections at --concurrency, interleaved rounds; requests/s medians and
 *    ratios to Bearer (what Basic parsing and link verification cost per request).
 *
 *   node bench/clients.ts [--rounds 3] [--big-mib 256] [--small-seconds 2] [--concurrency 8]
 *
 * Everything it starts is stopped and every temporary directory removed at the end.
 */
import { randomBytes } from 'node:crypto';
import { rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Agent, request } from 'undici';
import { download } from '../client/index.ts';
import { median, MiB, benchArgs, rotatedOrder, startEmbeddedGateway } from './support.ts';

import { makeTempDir, runCli, runProcess, STOP_GRACE_MS, type GatewayProcess } from '../test/harness/index.ts';

const args = benchArgs({ rounds: '3', 'big-mib': '256', 'small-seconds': '2', concurrency: '8' });
const ROUNDS = Number(args.rounds);
const BIG = Number(args['big-mib']) * MiB;
const SMALL_SECONDS = Number(args['small-seconds']);
const CONCURRENCY = Number(args.concurrency);

async function call(
  url: string,
  init: { method?: string; key: string; body?: Buffer | string; json?: boolean },
): Promise<{ status: number; text: string }> {
  const res = await request(url, {
    method: (init.method ?? 'GET') as 'GET',
    headers: { authorization: `Bearer ${init.key}`, ...(init.json ? { 'content-type': 'application/json' } : {}) },
    ...(init.body !== undefined ? { body: init.body } : {}),
  });
  return { status: res.statusCode, text: await res.body.text() };
}

async function timed(work: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await work();
  return (performance.now() - started) / 1000;
}

/** Requests/s of GETs with `headers` on `url` over CONCURRENCY keep-alive connections for SMALL_SECONDS. */
async function requestRate(url: string, headers: Record<string, string>): Promise<number> {
  const agent = new Agent({ connections: CONCURRENCY, pipelining: 1 });
  const deadline = performance.now() + SMALL_SECONDS * 1000;
  let done = 0;
  const worker = async () => {
    while (performance.now() < deadline) {
      const res = await request(url, { headers, dispatcher: agent });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`GET answered ${res.statusCode}`);
      done++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const rate = done / ((performance.now() - started) / 1000);
  await agent.close();
  return rate;
}

async function main(): Promise<void> {
  const dataDir = await makeTempDir('arkvory-bench-clients-');
  const work = await makeTempDir('arkvory-bench-clients-out-');
  let gw: GatewayProcess | undefined;
  try {
    const started = await startEmbeddedGateway({
      env: {
        ARKVORY_DATA_DIR: dataDir,
        ARKVORY_LOG_LEVEL: 'warn',
        ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: String(Math.max(CONCURRENCY, 4)),
      },
      timeoutMs: 120_000,
    });
    gw = started;
    const base = gw.url;
    const key = started.adminKey;
    await call(`${base}/api/v1/admin/repositories`, {
      method: 'POST',
      key,
      body: JSON.stringify({ name: 'bench' }),
      json: true,
    });
    await call(`${base}/api/v1/admin/grants/admin/bench`, {
      method: 'PUT',
      key,
      body: JSON.stringify({ permission: 'write' }),
      json: true,
    });
    const big = randomBytes(BIG);
    const small = randomBytes(4096);
    for (const [name, body] of [
      ['big.bin', big],
      ['small.bin', small],
    ] as const) {
      const put = await call(`${base}/api/v1/repositories/bench/artifacts/${name}`, { method: 'PUT', key, body });
      if (put.status !== 201) throw new Error(`upload of ${name} answered ${put.status}: ${put.text}`);
    }
    const bigUrl = `${base}/api/v1/repositories/bench/artifacts/big.bin/content`;
    const smallUrl = `${base}/api/v1/repositories/bench/artifacts/small.bin/content`;
    const link = JSON.parse(
      (await call(`${base}/api/v1/repositories/bench/artifacts/small.bin/presign`, { method: 'POST', key })).text,
    ) as { path: string };

    const large: Record<string, number[]> = { curl: [], sdk: [], cli: [] };
    const out = path.join(work, 'big.out');
    for (let round = 0; round < ROUNDS; round++) {
      // Interleaved, and the order rotates each round so no contender always runs first.
      const contenders: Array<[string, () => Promise<void>]> = [
        [
          'curl',
          async () =>
            void (await runProcess('curl', ['-sS', '--fail', '-H', `Authorization: Bearer ${key}`, '-o', out, bigUrl])),
        ],
        ['sdk', async () => void (await download({ url: bigUrl, output: out, key }))],
        ['cli', async () => void (await runCli(['get', bigUrl, '-o', out], { ARKVORY_KEY: key }))],
      ];
      for (const i of rotatedOrder(contenders.length, round)) {
        const [name, fn] = contenders[i]!;
        await rm(out, { force: true });
        const seconds = await timed(fn);
        if ((await stat(out)).size !== BIG) throw new Error(`${name} did not write the whole file`);
        large[name]!.push(BIG / MiB / seconds);
      }
    }

    const forms: Record<string, number[]> = { bearer: [], basic: [], presigned: [] };
    for (let round = 0; round < ROUNDS; round++) {
      const contenders: Array<[string, () => Promise<number>]> = [
        ['bearer', () => requestRate(smallUrl, { authorization: `Bearer ${key}` })],
        [
          'basic',
          () => requestRate(smallUrl, { authorization: `Basic ${Buffer.from(`admin:${key}`).toString('base64')}` }),
        ],
        ['presigned', () => requestRate(`${base}${link.path}`, {})],
      ];
      for (const i of rotatedOrder(contenders.length, round)) {
        const [name, fn] = contenders[i]!;
        forms[name]!.push(await fn());
      }
    }

    const lines = [
      `machine: ${os.cpus().length} CPUs (${os.loadavg()[0]!.toFixed(1)} load average), ${ROUNDS} rounds, medians`,
    ];
    lines.push(`large download (${BIG / MiB} MiB to disk), MiB/s:`);
    for (const name of ['curl', 'sdk', 'cli'])
      lines.push(
        `  ${name.padEnd(9)} ${median(large[name]!).toFixed(1).padStart(8)}   ratio to curl ${(median(large[name]!) / median(large.curl!)).toFixed(2)}   rounds ${large[name]!.map((v) => v.toFixed(0)).join(' ')}`,
      );
    lines.push(`small GET (4 KiB, ${CONCURRENCY} keep-alive connections, ${SMALL_SECONDS} s), requests/s:`);
    for (const name of ['bearer', 'basic', 'presigned'])
      lines.push(
        `  ${name.padEnd(9)} ${median(forms[name]!).toFixed(0).padStart(8)}   ratio to bearer ${(median(forms[name]!) / median(forms.bearer!)).toFixed(2)}   rounds ${forms[name]!.map((v) => v.toFixed(0)).join(' ')}`,
      );
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await gw?.stop('SIGTERM', STOP_GRACE_MS);
    await rm(dataDir, { recursive: true, force: true });
    await rm(work, { recursive: true, force: true });
  }
}

await main();
