/**
 * TLS benchmark (issue 36): the gateway's own TLS listener against nginx serving the same file with
 * the same certificate (RSA 2048, made for the run), in interleaved rounds (the order alternates):
 *
 *   node bench/tls.ts [--database-url postgres://…] [--rounds 5] [--big-mib 1024]
 *                     [--handshake-seconds 3] [--handshake-concurrency 4]
 *
 * - a whole-file GET over HTTPS/1.1 (curl --http1.1 to /dev/null), MiB/s; the gateway
 *   authenticates the request (Bearer) as in production;
 * - new TLS connections per second, each a full handshake then a close (no HTTP request), with
 *   session resumption off (a new session every time) and on (the previous connection's ticket
 *   offered); the client is a node:tls loop in this process with `--handshake-concurrency`
 *   connections in flight, the same for both servers. The share of resumed handshakes is printed.
 *
 * Medians of the rounds and the ratio gateway ÷ nginx (target for the GET: ≥ 0.8). Without
 * --database-url an embedded PostgreSQL is started in the work directory. Nothing is left behind.
 */
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import {
  createCertificateAuthority,
  freeLoopbackPort,
  issueServerCertificate,
  makeTempDir,
  waitForHttp,
} from '../test/harness/index.ts';
import { BenchRun, benchNginxConf, curlWith, median, MiB, startNginx, writeRandomFile, benchArgs } from './support.ts';

const args = benchArgs({ rounds: '5', 'big-mib': '1024', 'handshake-seconds': '3', 'handshake-concurrency': '4' }, [
  'database-url',
]);
const ROUNDS = Number(args.rounds);
const BIG_BYTES = Number(args['big-mib']) * MiB;
const HANDSHAKE_MS = Number(args['handshake-seconds']) * 1000;
const HANDSHAKE_CONCURRENCY = Number(args['handshake-concurrency']);

interface Target {
  readonly name: 'gateway' | 'nginx';
  readonly port: number;
  readonly bigUrl: string;
  readonly headers: Record<string, string>;
}

/** One whole-file GET over HTTPS/1.1: MiB/s. */
async function measureGet(target: Target, caFile: string): Promise<number> {
  const argv = ['--http1.1', '--cacert', caFile];
  for (const [k, v] of Object.entries(target.headers)) argv.push('-H', `${k}: ${v}`);
  const r = await curlWith([...argv, target.bigUrl]);
  if (r.status !== 200 || r.bytes !== BIG_BYTES)
    throw new Error(`${target.name}: GET answered ${r.status} with ${r.bytes} bytes`);
  return BIG_BYTES / MiB / r.seconds;
}

/**
 * New TLS connections per second for `HANDSHAKE_MS`: each connects, completes the handshake
 * (verifying the certificate against `ca`) and closes. `resume`: offer the last session ticket.
 */
async function measureHandshakes(
  target: Target,
  ca: string,
  resume: boolean,
): Promise<{ perSec: number; resumedShare: number; errors: number }> {
  let session: Buffer | undefined;
  let done = 0;
  let resumed = 0;
  let errors = 0;
  const deadline = performance.now() + HANDSHAKE_MS;
  const one = () =>
    new Promise<void>((resolve) => {
      const socket = tls.connect({
        host: '127.0.0.1',
        port: target.port,
        ca,
        servername: 'localhost',
        ...(resume && session ? { session } : {}),
      });
      let settled = false;
      const finish = () => {
        if (settled) return;
        settled = true;
        socket.destroy();
        resolve();
      };
      // TLS 1.3 sends its ticket after the handshake: with resumption on and no ticket yet, wait
      // for one (bounded); later connections offer the ticket held (both servers' tickets are
      // stateless, so one may be offered again) and close at once, as with resumption off.
      const waitForTicket = resume && session === undefined;
      socket.on('session', (s: Buffer) => {
        session = s;
        if (waitForTicket) finish();
      });
      socket.once('secureConnect', () => {
        done++;
        if (socket.isSessionReused()) resumed++;
        if (waitForTicket) setTimeout(finish, 500).unref();
        else finish();
      });
      socket.on('error', () => {
        errors++;
        finish();
      });
    });
  const started = performance.now();
  await Promise.all(
    Array.from({ length: HANDSHAKE_CONCURRENCY }, async () => {
      while (performance.now() < deadline) await one();
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { perSec: done / seconds, resumedShare: done ? resumed / done : 0, errors };
}

async function main(): Promise<void> {
  const work = await makeTempDir('arkvory-bench-tls-');
  const files = path.join(work, 'files');
  await mkdir(files, { recursive: true });
  const ca = await createCertificateAuthority(path.join(work, 'ca'));
  const certificate = await issueServerCertificate(ca, path.join(work, 'ca'), 'server');
  // This process's probes (fetch) and clients trust the run's CA, as a configured client would.
  tls.setDefaultCACertificates([...tls.getCACertificates('default'), ca.certPem]);

  const bench = await BenchRun.open(work, args['database-url']);
  try {
    const db = await bench.seededDatabase(1);
    const key = db.keys[0]!;
    process.stderr.write(`writing a ${BIG_BYTES / MiB} MiB file under ${files}\n`);
    await writeRandomFile(path.join(files, 'big.bin'), BIG_BYTES);

    const gatewayPort = await freeLoopbackPort();
    const gateway = await bench.gateway(
      'gateway',
      {
        ARKVORY_DATA_DIR: path.join(work, 'data'),
        ARKVORY_MAX_UPLOAD_BYTES: String(BIG_BYTES * 2),
        ARKVORY_TLS_CERT_FILE: certificate.certFile,
        ARKVORY_TLS_KEY_FILE: certificate.keyFile,
      },
      { databaseUrl: db.url, port: gatewayPort, waitFor: 'none' },
    );
    const gatewayBase = `https://127.0.0.1:${gatewayPort}`;
    await waitForHttp(`${gatewayBase}/health/status`, { what: 'the TLS gateway', timeoutMs: 60_000, process: gateway });
    const bigPath = '/api/v1/repositories/bench/artifacts/big.bin';
    const put = await curlWith([
      '--http1.1',
      '--cacert',
      ca.certFile,
      '-H',
      `authorization: Bearer ${key}`,
      '-T',
      path.join(files, 'big.bin'),
      `${gatewayBase}${bigPath}`,
    ]);
    if (put.status !== 201) throw new Error(`upload answered ${put.status}`);

    const nginxBin = ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
    if (!nginxBin) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
    const nginxPort = await freeLoopbackPort();
    const prefix = path.join(work, 'nginx');
    await mkdir(prefix, { recursive: true });
    await writeFile(
      path.join(prefix, 'nginx.conf'),
      `${process.getuid?.() === 0 ? 'user root;\n' : ''}${benchNginxConf({
        prefix,
        port: nginxPort,
        root: files,
        bodyTemp: `${prefix}/body`,
        tls: { certFile: certificate.certFile, keyFile: certificate.keyFile },
      })}`,
    );
    bench.keep(await startNginx(nginxBin, prefix, `https://127.0.0.1:${nginxPort}/big.bin`, { isReady: () => true }));

    const targets: Target[] = [
      {
        name: 'gateway',
        port: gatewayPort,
        bigUrl: `${gatewayBase}${bigPath}/content`,
        headers: { authorization: `Bearer ${key}` },
      },
      { name: 'nginx', port: nginxPort, bigUrl: `https://127.0.0.1:${nginxPort}/big.bin`, headers: {} },
    ];
    const figures = {
      get: { gateway: [] as number[], nginx: [] as number[] },
      fresh: { gateway: [] as number[], nginx: [] as number[] },
      resumed: { gateway: [] as number[], nginx: [] as number[] },
      resumedShare: { gateway: [] as number[], nginx: [] as number[] },
    };
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const target of order) figures.get[target.name].push(await measureGet(target, ca.certFile));
      for (const target of order) {
        const fresh = await measureHandshakes(target, ca.certPem, false);
        const resumed = await measureHandshakes(target, ca.certPem, true);
        if (fresh.errors || resumed.errors)
          throw new Error(`${target.name}: ${fresh.errors + resumed.errors} handshakes failed`);
        figures.fresh[target.name].push(fresh.perSec);
        figures.resumed[target.name].push(resumed.perSec);
        figures.resumedShare[target.name].push(resumed.resumedShare);
      }
      process.stderr.write(
        `round ${round + 1}/${ROUNDS}: GET gateway ${figures.get.gateway.at(-1)!.toFixed(0)} nginx ${figures.get.nginx.at(-1)!.toFixed(0)} MiB/s; ` +
          `handshakes/s new ${figures.fresh.gateway.at(-1)!.toFixed(0)}/${figures.fresh.nginx.at(-1)!.toFixed(0)}, ` +
          `resumed ${figures.resumed.gateway.at(-1)!.toFixed(0)}/${figures.resumed.nginx.at(-1)!.toFixed(0)}\n`,
      );
    }

    const row = (what: string, unit: string, g: number[], n: number[], digits = 0) =>
      `| ${what} | ${median(g).toFixed(digits)} ${unit} | ${median(n).toFixed(digits)} ${unit} | ${(median(g) / median(n)).toFixed(2)} |`;
    const load = os.loadavg().map((l) => l.toFixed(1));
    console.log(
      [
        `TLS benchmark: ${ROUNDS} interleaved rounds, ${BIG_BYTES / MiB} MiB file, handshakes for ${HANDSHAKE_MS / 1000} s × ${HANDSHAKE_CONCURRENCY} in flight; ${os.cpus().length} CPUs, load ${load.join(' ')}`,
        '',
        '| measure | gateway | nginx | gateway ÷ nginx |',
        '| --- | --- | --- | --- |',
        row(`GET ${BIG_BYTES / MiB} MiB, HTTPS/1.1 (median)`, 'MiB/s', figures.get.gateway, figures.get.nginx),
        row('new TLS connections, resumption off', '/s', figures.fresh.gateway, figures.fresh.nginx),
        row('new TLS connections, resumption on', '/s', figures.resumed.gateway, figures.resumed.nginx),
        row(
          'share of resumed handshakes (resumption on)',
          '',
          figures.resumedShare.gateway,
          figures.resumedShare.nginx,
          2,
        ),
        '',
        `GET target gateway ÷ nginx ≥ 0.80: ${median(figures.get.gateway) / median(figures.get.nginx) >= 0.8 ? 'met' : 'NOT met'}`,
      ].join('\n'),
    );
  } finally {
    await bench.close();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
