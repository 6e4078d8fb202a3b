/**
 * HTTP/2 on a gateway's TLS listener (h2 and http/1.1 on one port by ALPN), with real clients and
 * real processes: curl --http2 (full GET, Range, multi-range, upload with and without
 * `Expect: 100-continue`, resume), aria2c -x8 (HTTP/1.1 over TLS on the same port), h2spec's
 * conformance suite and h2load; per-stream admission (four streams of one principal on one
 * connection are four transfers, the fifth waits, a reset frees its slot); flow control as the
 * backpressure; and the abuses of HTTP/2 (rapid reset, PING, SETTINGS and CONTINUATION floods, too
 * many streams), each with the gateway's memory, CPU time and a well-behaved client's latency measured.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import http2 from 'node:http2';
import path from 'node:path';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type Http2Answer, http2Request } from '../../test/support/http2-request.ts';
import { curlHead } from '../../test/support/curl-head.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';
import { FRAME, frame, PREFACE, windowUpdate } from '../../test/support/http2-frames.ts';
import { RESET_BUDGET } from './front-door/http2.ts';
import { CLIENT_FAULT_LOG } from '../../lib/log-budget.ts';

const run = promisify(execFile);
const KiB = 1024;
const MiB = 1024 * KiB;
const REPO = 'h2repo';

const db = useTestDatabase();
let dir: string;
let ca: CertificateAuthority;
let certFile: string;
let keyFile: string;
let owner: { key: string };
const payload = randomContent(3 * MiB + 321);
const artifact = `/api/v1/repositories/${REPO}/artifacts/blob.bin`;

beforeAll(async () => {
  dir = await makeTempDir('arkvory-h2-');
  ca = await createCertificateAuthority(dir);
  const server = await issueServerCertificate(ca, dir);
  certFile = server.certFile;
  keyFile = server.keyFile;
  await createRepository(db.pool, REPO);
  owner = await createServiceAccount(db.pool, { name: 'h2-owner', grants: { [REPO]: 'write' } });
});

/** A gateway serving TLS (h2 and http/1.1), started and answering over HTTP/2. */
async function startH2Gateway(extra: Record<string, string> = {}): Promise<GatewayProcess & { https: string }> {
  const gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TLS_CERT_FILE: certFile, ARKVORY_TLS_KEY_FILE: keyFile, ...extra },
    waitFor: 'none',
  });
  const url = `https://127.0.0.1:${gw.port}`;
  const deadline = Date.now() + 40_000;
  let last: unknown;
  for (;;) {
    if (gw.child.exitCode !== null) throw new Error(`gateway exited:\n${gw.logs()}`);
    try {
      const r = await h2Request(url, '/health/status');
      if (r.status === 200) return Object.assign(gw, { https: url });
      last = `${r.status} ${r.body}`;
    } catch (err) {
      // not listening yet
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`not serving (last: ${last}):\n${gw.logs().slice(-3000)}`);
    await sleep(100);
  }
}

/** One request on a new HTTP/2 connection (or on `session`), answered within 20 s. */
function h2Request(
  origin: string,
  target: string,
  options: Omit<NonNullable<Parameters<typeof http2Request>[3]>, 'timeoutMs'> = {},
): Promise<Http2Answer> {
  return http2Request(origin, ca.certPem, target, { ...options, timeoutMs: 20_000 });
}

/** Resident memory (bytes) and CPU time (ms, user + system) of a process, from /proc. */
export async function usage(pid: number): Promise<{ rss: number; cpuMs: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime are fields 14 and 15 of stat (11 and 12 after the command), in clock ticks (100 Hz).
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rss: rssKiB * KiB, cpuMs: ticks * 10 };
}

/** A sample of the gateway's `/metrics` (fetched over HTTP/2): `name{labels}` → value, 0 when absent. */
async function metric(gw: { https: string }, series: string): Promise<number> {
  const text = (await h2Request(gw.https, '/metrics')).body.toString();
  for (const line of text.split('\n')) if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  return 0;
}

/**
 * The gateway on default settings, shared by the listener and the conformance describes (one start,
 * not two); the second stops it (one writer per database). The others change its settings or
 * measure it alone.
 */
let defaultGateway: Promise<GatewayProcess & { https: string }> | undefined;
const defaultH2Gateway = () => (defaultGateway ??= startH2Gateway());

describe('HTTP/2 on the TLS listener', () => {
  let gw: GatewayProcess & { https: string };
  beforeAll(async () => {
    gw = await defaultH2Gateway();
  });

  const curl = (args: string[]) => run('curl', ['-sS', '--cacert', ca.certFile, ...args], { maxBuffer: 64 * MiB });

  it('ALPN offers h2 and http/1.1 on the same port', async () => {
    for (const [offer, expected] of [
      [['h2', 'http/1.1'], 'h2'],
      [['http/1.1'], 'http/1.1'],
    ] as const) {
      const protocol = await new Promise<string | false>((resolve, reject) => {
        const socket = tls.connect(
          { host: '127.0.0.1', port: gw.port, ca: ca.certPem, servername: 'localhost', ALPNProtocols: [...offer] },
          () => {
            resolve(socket.alpnProtocol ?? false);
            socket.destroy();
          },
        );
        socket.on('error', reject);
      });
      expect(protocol).toBe(expected);
    }
  });

  it('curl --http2: upload (with and without Expect: 100-continue), full GET, Range and multi-range, byte-exact', async () => {
    const upload = path.join(dir, 'upload.bin');
    await writeFile(upload, payload);
    for (const expect100 of [false, true]) {
      const put = await curl([
        '--http2',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code} %{http_version}',
        '-X',
        'PUT',
        '-H',
        `Authorization: Bearer ${owner.key}`,
        '-H',
        expect100 ? 'Expect: 100-continue' : 'Expect:',
        '--data-binary',
        `@${upload}`,
        `${gw.https}${artifact}`,
      ]);
      expect(put.stdout).toMatch(/^20[01] 2$/);
    }
    const out = path.join(dir, 'h2-get.bin');
    const get = await curl([
      '--http2',
      '-H',
      `Authorization: Bearer ${owner.key}`,
      '-o',
      out,
      '-w',
      '%{http_code} %{http_version}',
      `${gw.https}${artifact}/content`,
    ]);
    expect(get.stdout).toBe('200 2');
    expect(sha256(await readFile(out))).toBe(sha256(payload));
    const range = await h2Request(gw.https, `${artifact}/content`, {
      headers: { ...bearer(owner.key), range: 'bytes=1000-1999' },
    });
    expect(range.status).toBe(206);
    expect(range.headers['content-range']).toBe(`bytes 1000-1999/${payload.length}`);
    expect(range.body.equals(payload.subarray(1000, 2000))).toBe(true);
    const multi = await curl([
      '--http2',
      '-H',
      `Authorization: Bearer ${owner.key}`,
      '-r',
      '0-9,100-109',
      '-D',
      '-',
      '-o',
      path.join(dir, 'multi.bin'),
      `${gw.https}${artifact}/content`,
    ]);
    expect(multi.stdout).toMatch(/^HTTP\/2 206/);
    const boundary = /content-type: multipart\/byteranges; boundary=(\S+)/i.exec(multi.stdout)?.[1];
    expect(boundary).toBeDefined();
    const multiBody = (await readFile(path.join(dir, 'multi.bin'))).toString('latin1');
    expect(multiBody).toContain(payload.subarray(0, 10).toString('latin1'));
    expect(multiBody).toContain(payload.subarray(100, 110).toString('latin1'));
  });

  it('conditional requests: If-None-Match answers 304 over HTTP/2', async () => {
    const first = await h2Request(gw.https, `${artifact}/content`, { method: 'HEAD', headers: bearer(owner.key) });
    const etag = first.headers.etag as string;
    expect(etag).toBeDefined();
    const again = await h2Request(gw.https, `${artifact}/content`, {
      headers: { ...bearer(owner.key), 'if-none-match': etag },
    });
    expect(again.status).toBe(304);
  });

  it('curl --http2: a pre-signed link is made on the origin the client used (its :authority) and serves the bytes', async () => {
    const made = await curl([
      '--http2',
      '-X',
      'POST',
      '-H',
      `authorization: Bearer ${owner.key}`,
      '-H',
      'content-type: application/json',
      '--data',
      '{}',
      `${gw.https}${artifact}/presign`,
    ]);
    const link = JSON.parse(made.stdout) as { url: string; path: string };
    expect(link.url).toBe(`${gw.https}${link.path}`);
    const file = path.join(dir, 'by-link.bin');
    const got = await curl(['--http2', '-o', file, '-w', '%{http_version} %{http_code}', link.url]);
    expect(got.stdout).toBe('2 200');
    expect(sha256(await readFile(file))).toBe(sha256(payload));
  });

  it('curl -C - resumes a partial file over HTTP/2, byte-exact', async () => {
    const out = path.join(dir, 'resume.bin');
    await writeFile(out, payload.subarray(0, 1234567));
    const r = await curl([
      '--http2',
      '-C',
      '-',
      '-H',
      `Authorization: Bearer ${owner.key}`,
      '-o',
      out,
      '-w',
      '%{http_code} %{http_version}',
      `${gw.https}${artifact}/content`,
    ]);
    expect(r.stdout).toBe('206 2');
    expect(sha256(await readFile(out))).toBe(sha256(payload));
  });

  it('aria2c -x8 (HTTP/1.1 over TLS on the same port) downloads byte-exact', async () => {
    const outDir = await makeTempDir('arkvory-h2-aria-');
    await run('aria2c', [
      '-x8',
      '-s8',
      '-k1M',
      '--ca-certificate',
      ca.certFile,
      `--header=Authorization: Bearer ${owner.key}`,
      '-d',
      outDir,
      '-o',
      'a.bin',
      '--allow-overwrite=true',
      '--console-log-level=warn',
      '--summary-interval=0',
      `${gw.https}${artifact}/content`,
    ]);
    expect(sha256(await readFile(path.join(outDir, 'a.bin')))).toBe(sha256(payload));
  });
});

describe('HTTP/2 conformance and load', () => {
  let gw: GatewayProcess & { https: string };
  beforeAll(async () => {
    gw = await defaultH2Gateway();
  });
  afterAll(() => gw.stop());

  /**
   * The h2spec cases node:http2 (nghttp2) itself fails: a bare `http2.createSecureServer` fails these
   * and more (measured with h2spec 2.2.1 on Node 24). None is a bound the gateway relies on.
   */
  const NODE_OWN_FAILURES: Record<string, string> = {
    // nghttp2 keeps closed streams briefly and ignores late frames on them instead of STREAM_CLOSED.
    'closed: Sends a DATA frame': 'nghttp2 ignores frames on a recently closed stream',
    'closed: Sends a HEADERS frame': 'nghttp2 ignores frames on a recently closed stream',
    'closed: Sends a DATA frame after sending RST_STREAM frame': 'nghttp2 ignores frames on a reset stream',
    'closed: Sends a HEADERS frame after sending RST_STREAM frame': 'nghttp2 ignores frames on a reset stream',
    // The answer to the earlier stream is on the wire before the GOAWAY; h2spec reads the first frame.
    'Sends stream identifier that is numerically smaller than previous': 'the previous answer arrives before GOAWAY',
    // RFC 9113 deprecates the priority scheme; nghttp2 ignores PRIORITY frames.
    'Sends PRIORITY frame that depend on itself': 'nghttp2 ignores PRIORITY (RFC 9113 §5.3.2)',
    'Sends a PRIORITY frame with 0x0 stream identifier': 'nghttp2 ignores PRIORITY (RFC 9113 §5.3.2)',
    // Node closes a session on an unsolicited PING ack, on purpose (no legitimate peer sends one).
    'Sends a PING frame with ACK': 'node:http2 closes the session on an unsolicited PING ack',
    // A stream window overflow ends the whole session in node:http2, not only the stream: stricter.
    'Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1 on a stream':
      'node:http2 ends the session instead of resetting the stream',
  };

  /** h2spec's three specs, by the title its dry run prints, and the name its case ids start with. */
  const H2SPEC_SPECS: Record<string, string> = {
    'Generic tests for HTTP/2 server': 'generic',
    'Hypertext Transfer Protocol Version 2 (HTTP/2)': 'http2',
    'HPACK: Header Compression for HTTP/2': 'hpack',
  };

  /** Every case id h2spec has (`http2/5.1/8`), read from its dry run. */
  async function h2specCaseIds(): Promise<string[]> {
    const { stdout } = await run('h2spec', ['--dryrun']).catch((err: { code?: unknown }) => {
      if (err.code === 'ENOENT')
        throw new Error('h2spec is not on PATH: run `bash scripts/test-tools.sh` (it installs it with go install)');
      throw err;
    });
    const ids: string[] = [];
    let spec: string | undefined;
    let section: string | undefined;
    for (const line of stdout.split('\n')) {
      if (line.trim() === '') continue;
      if (!line.startsWith(' ')) {
        spec = H2SPEC_SPECS[line.trim()];
        if (!spec) throw new Error(`an h2spec spec this test does not know: "${line}"`);
        continue;
      }
      const sectionLine = /^\s+([\d.]+)\. /.exec(line);
      if (sectionLine) section = sectionLine[1];
      const caseLine = /^\s+(\d+): /.exec(line);
      if (caseLine) ids.push(`${spec}/${section}/${caseLine[1]}`);
    }
    return ids;
  }

  // Each case runs alone, eight at a time: a case node:http2 fails waits out h2spec's 5 s timeout,
  // and run one after another those waits were most of the file's time.
  it('h2spec: every case passes but those node:http2 itself fails (listed with the reason)', async () => {
    const ids = await h2specCaseIds();
    expect(ids.length).toBeGreaterThanOrEqual(145);
    const runCase = async (id: string): Promise<string> => {
      const { stdout } = await run(
        'h2spec',
        [id, '-t', '-k', '-h', '127.0.0.1', '-p', String(gw.port), '-P', '/health/live', '-o', '5'],
        { maxBuffer: 16 * MiB },
      ).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }));
      return stdout;
    };
    const failures = (stdout: string): string[] =>
      stdout.includes('Failures:')
        ? [...stdout.slice(stdout.indexOf('Failures:')).matchAll(/× \d+: (.+)$/gm)].map((m) => m[1]!.trim())
        : [];
    const outputs: string[] = [];
    let next = 0;
    const runCases = async () => {
      while (next < ids.length) {
        const id = ids[next++]!;
        let stdout = await runCase(id);
        // h2spec judges some cases by the first frame it reads. The answer to its GET of
        // /health/live is sent once the request's HEADERS are read, so on a loaded machine it can be
        // on the wire before the server reads the bad frame that follows (seen: a pseudo-header in
        // trailers, answered DATA first). Such a case is run once more, alone; a real failure
        // fails twice.
        if (failures(stdout).some((name) => !(name in NODE_OWN_FAILURES))) stdout = await runCase(id);
        outputs.push(stdout);
      }
    };
    await Promise.all(Array.from({ length: 8 }, runCases));
    const totals = { tests: 0, passed: 0, skipped: 0, failed: 0 };
    const failed: string[] = [];
    for (const stdout of outputs) {
      const summary = /(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed/.exec(stdout);
      expect(summary, stdout.slice(-4000)).not.toBeNull();
      totals.tests += Number(summary![1]);
      totals.passed += Number(summary![2]);
      totals.skipped += Number(summary![3]);
      totals.failed += Number(summary![4]);
      failed.push(...failures(stdout));
    }
    expect(totals.tests).toBe(ids.length);
    expect(failed.length).toBe(totals.failed);
    expect(
      failed.filter((name) => !(name in NODE_OWN_FAILURES)),
      outputs.filter((o) => o.includes('Failures:')).join('\n'),
    ).toEqual([]);
    expect(totals.passed).toBeGreaterThanOrEqual(136);
  });

  it('h2load: 2,000 requests over 8 connections × 8 streams, none failed', async () => {
    const { stdout } = await run('h2load', ['-n2000', '-c8', '-m8', `${gw.https}/health/live`]);
    const reqs = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored/.exec(
      stdout,
    );
    expect(reqs, stdout).not.toBeNull();
    expect(Number(reqs![4])).toBe(2000);
    expect(Number(reqs![5])).toBe(0);
    expect(stdout).toMatch(/Application protocol: h2/);
  });

  it('nghttp: a GET over h2 with the CA answers 200', async () => {
    const { stdout } = await run('nghttp', ['-v', '-n', `${gw.https}/health/live`]);
    expect(stdout).toMatch(/:status: 200/);
  });
});

/** An HPACK literal without indexing, its name from the static table (values under 127 bytes). */
function literal(index: number, value: string): Buffer {
  const name = index < 15 ? [index] : [0x0f, index - 15];
  return Buffer.concat([Buffer.from([...name, value.length]), Buffer.from(value)]);
}

/** An HPACK block for `GET path` (static-table names, literal values, no indexing), with `authorization`. */
function getHeaders(target: string, authorization?: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x82, 0x87]),
    literal(0x04, target),
    literal(0x01, '127.0.0.1'),
    ...(authorization ? [literal(23, authorization)] : []),
  ]);
}

/** A raw HTTP/2 connection over TLS: frames written by hand, the server's GOAWAY and resets collected. */
class RawH2 {
  goaway: number | undefined;
  readonly resets: number[] = [];
  /** Streams the server answered (a HEADERS frame), and the code of each stream it reset. */
  readonly answered = new Set<number>();
  readonly resetStreams = new Map<number, number>();
  /** PING acks the server sent. */
  pingAcks = 0;
  closed = false;
  readonly socket: tls.TLSSocket;
  #buffer = Buffer.alloc(0);
  private constructor(socket: tls.TLSSocket) {
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => this.#read(chunk));
    socket.on('close', () => (this.closed = true));
    socket.on('error', () => {});
  }

  static open(port: number): Promise<RawH2> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect(
        { host: '127.0.0.1', port, ca: ca.certPem, servername: 'localhost', ALPNProtocols: ['h2'] },
        () => {
          socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
          resolve(new RawH2(socket));
        },
      );
      socket.once('error', reject);
    });
  }

  /** Writes `data`; resolves once the socket took it (false: the connection is gone). */
  write(data: Buffer): Promise<boolean> {
    if (this.closed || this.socket.destroyed) return Promise.resolve(false);
    return new Promise((resolve) => {
      if (this.socket.write(data)) resolve(true);
      else {
        // Whichever comes first removes the other: a writer that often waits for 'drain' would
        // otherwise leave a 'close' listener behind each time.
        const done = () => {
          this.socket.off('drain', done).off('close', done);
          resolve(!this.closed);
        };
        this.socket.once('drain', done);
        this.socket.once('close', done);
      }
    });
  }

  #read(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    while (this.#buffer.length >= 9) {
      const length = this.#buffer.readUIntBE(0, 3);
      if (this.#buffer.length < 9 + length) return;
      const type = this.#buffer.readUInt8(3);
      const payload = this.#buffer.subarray(9, 9 + length);
      if (type === FRAME.GOAWAY) this.goaway ??= payload.readUInt32BE(4);
      const stream = this.#buffer.readUInt32BE(5) & 0x7fffffff;
      if (type === FRAME.RST_STREAM) {
        this.resets.push(payload.readUInt32BE(0));
        this.resetStreams.set(stream, payload.readUInt32BE(0));
      }
      if (type === FRAME.HEADERS) this.answered.add(stream);
      if (type === FRAME.PING && (this.#buffer.readUInt8(4) & 1) === 1) this.pingAcks++;
      if (type === FRAME.SETTINGS && (this.#buffer.readUInt8(4) & 1) === 0)
        this.socket.write(frame(FRAME.SETTINGS, 1, 0));
      this.#buffer = this.#buffer.subarray(9 + length);
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

/**
 * Runs `attack` while a well-behaved client asks `/health/live` every 50 ms on its own HTTP/2
 * connection, and samples the gateway's RSS; returns the memory growth, the CPU time the gateway
 * spent, and the good client's slowest answer and failures.
 */
async function underAttack(
  gw: GatewayProcess & { https: string },
  attack: () => Promise<void>,
): Promise<{ rssGrowth: number; cpuMs: number; worstMs: number; failures: number; served: number }> {
  const pid = gw.child.pid!;
  const before = await usage(pid);
  let peakRss = before.rss;
  let worstMs = 0;
  let failures = 0;
  let served = 0;
  let running = true;
  const good = http2.connect(gw.https, { ca: ca.certPem });
  good.on('error', () => {});
  const probe = (async () => {
    while (running) {
      const started = performance.now();
      try {
        const r = await h2Request(gw.https, '/health/live', { session: good });
        if (r.status === 200) served++;
        else failures++;
      } catch {
        failures++;
      }
      worstMs = Math.max(worstMs, performance.now() - started);
      peakRss = Math.max(peakRss, (await usage(pid)).rss);
      await sleep(50);
    }
  })();
  try {
    await attack();
    await sleep(300);
  } finally {
    running = false;
    await probe;
    good.close();
  }
  const after = await usage(pid);
  return { rssGrowth: peakRss - before.rss, cpuMs: after.cpuMs - before.cpuMs, worstMs, failures, served };
}

/** nghttp2's own stream reset rate limit: a burst of this many, then 33 a second (Node keeps the default). */
const NGHTTP2_RESET_BURST = 1000;

describe('HTTP/2 abuses are bounded (GOAWAY or refused streams; other clients unaffected)', () => {
  let gw: GatewayProcess & { https: string };
  beforeAll(async () => {
    gw = await startH2Gateway();
  });
  afterAll(() => gw.stop());
  const ENHANCE_YOUR_CALM = http2.constants.NGHTTP2_ENHANCE_YOUR_CALM;

  /**
   * The common bounds: memory, CPU and the good client's latency. The latency bound is 2 s: the
   * good client runs in the process that sends the attack, and on a loaded 2-core machine both
   * share the CPU with the gateway; a session the attack starved would wait far longer, or fail.
   */
  function expectBounded(r: Awaited<ReturnType<typeof underAttack>>): void {
    expect(r.failures).toBe(0);
    expect(r.served).toBeGreaterThan(0);
    expect(r.worstMs).toBeLessThan(2000);
    expect(r.rssGrowth).toBeLessThan(64 * MiB);
    expect(r.cpuMs).toBeLessThan(5000);
  }

  it.each([
    ['CANCEL', http2.constants.NGHTTP2_CANCEL],
    ['NO_ERROR', http2.constants.NGHTTP2_NO_ERROR],
  ])(
    'rapid reset (CVE-2023-44487): HEADERS + RST_STREAM (%s) in a loop ends the session with GOAWAY',
    async (_name, code) => {
      const goawaysBefore = await metric(gw, 'arkvory_http2_goaway_sent_total{reason="rapid_reset"}');
      const resetsBefore = await metric(gw, 'arkvory_http2_stream_resets_received_total');
      let raw: RawH2 | undefined;
      let sent = 0;
      const r = await underAttack(gw, async () => {
        raw = await RawH2.open(gw.port);
        await sleep(100);
        const get = getHeaders('/health/live');
        const cancel = Buffer.alloc(4);
        cancel.writeUInt32BE(code);
        for (let id = 1; sent < 20_000 && !raw.closed && raw.goaway === undefined; ) {
          const batch: Buffer[] = [];
          for (let i = 0; i < 50; i++, id += 2, sent++)
            batch.push(frame(FRAME.HEADERS, 5, id, get), frame(FRAME.RST_STREAM, 0, id, cancel));
          await raw.write(Buffer.concat(batch));
          await sleep(1);
        }
        await sleep(200);
      });
      // nghttp2's own reset rate limit answers INTERNAL_ERROR; the front door's budget ENHANCE_YOUR_CALM.
      expect(
        [ENHANCE_YOUR_CALM, http2.constants.NGHTTP2_INTERNAL_ERROR],
        `closed ${raw!.closed} after ${sent}`,
      ).toContain(raw!.goaway);
      raw!.close();
      expectBounded(r);
      // What the client got to send before the GOAWAY reached it depends on how busy the machine is;
      // the bound is on what the server took. The front door counts resets as their streams close,
      // nghttp2 as it reads the frames (a burst of 1,000), so whichever ends the session, it took no
      // more than nghttp2's burst: never an unbounded stream of them.
      const taken = (await metric(gw, 'arkvory_http2_stream_resets_received_total')) - resetsBefore;
      expect(taken, `sent ${sent}`).toBeLessThanOrEqual(NGHTTP2_RESET_BURST + 1);
      if (raw!.goaway === ENHANCE_YOUR_CALM) {
        // The front door's budget ended it: one GOAWAY counted, once the client had sent more than the
        // budget's resets. Not read from the resets metric: the budget also counts the client's
        // streams nghttp2 ended before they became requests (the gaps in its stream ids), which that
        // metric does not (a CI run saw the budget end it with 136 counted there); the exact
        // threshold, both kinds together, is pinned in http2-session-watch.test.ts.
        expect(await metric(gw, 'arkvory_http2_goaway_sent_total{reason="rapid_reset"}')).toBe(goawaysBefore + 1);
        expect(sent, `taken ${taken}`).toBeGreaterThan(RESET_BUDGET.resets);
      }
    },
  );

  /** Sends `one` frame in small paced batches (the client reads every ack) until the session ends. */
  async function paced(raw: RawH2, one: Buffer, max: number): Promise<number> {
    let sent = 0;
    while (sent < max && !raw.closed && raw.goaway === undefined) {
      await raw.write(Buffer.concat(Array.from({ length: 10 }, () => one)));
      sent += 10;
      await sleep(1);
    }
    return sent;
  }

  it('a PING flood ends the session with GOAWAY ENHANCE_YOUR_CALM, counted as ping_flood', async () => {
    const before = await metric(gw, 'arkvory_http2_goaway_sent_total{reason="ping_flood"}');
    let raw: RawH2 | undefined;
    let sent = 0;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      sent = await paced(raw, frame(FRAME.PING, 0, 0, Buffer.alloc(8)), 20_000);
      await sleep(200);
    });
    expect(raw!.goaway, `closed ${raw!.closed} after ${sent}`).toBe(ENHANCE_YOUR_CALM);
    expect(sent).toBeLessThan(2000);
    raw!.close();
    expectBounded(r);
    expect(await metric(gw, 'arkvory_http2_goaway_sent_total{reason="ping_flood"}')).toBe(before + 1);
  });

  it('a SETTINGS flood ends the session with GOAWAY ENHANCE_YOUR_CALM, counted as settings_flood', async () => {
    const before = await metric(gw, 'arkvory_http2_goaway_sent_total{reason="settings_flood"}');
    let raw: RawH2 | undefined;
    let sent = 0;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      sent = await paced(raw, frame(FRAME.SETTINGS, 0, 0, Buffer.from([0, 3, 0, 0, 0, 100])), 20_000);
      await sleep(200);
    });
    expect(raw!.goaway, `closed ${raw!.closed} after ${sent}`).toBe(ENHANCE_YOUR_CALM);
    expect(sent).toBeLessThan(2000);
    raw!.close();
    expectBounded(r);
    expect(await metric(gw, 'arkvory_http2_goaway_sent_total{reason="settings_flood"}')).toBe(before + 1);
  });

  it('PING floods on many sessions: each ended and counted, their log lines bounded', async () => {
    const SESSIONS = CLIENT_FAULT_LOG.linesPerInterval + 3;
    const before = await metric(gw, 'arkvory_http2_goaway_sent_total{reason="ping_flood"}');
    const linesBefore = gw.logLines().length;
    const goaways = await Promise.all(
      Array.from({ length: SESSIONS }, async () => {
        const raw = await RawH2.open(gw.port);
        await paced(raw, frame(FRAME.PING, 0, 0, Buffer.alloc(8)), 20_000);
        raw.close();
        return raw.goaway;
      }),
    );
    expect(goaways).toEqual(Array.from({ length: SESSIONS }, () => ENHANCE_YOUR_CALM));
    expect(await metric(gw, 'arkvory_http2_goaway_sent_total{reason="ping_flood"}')).toBe(before + SESSIONS);
    const flooded = () =>
      gw
        .logLines()
        .slice(linesBefore)
        .filter((l) => l.code === 'http2_flood');
    // Each line is written before its GOAWAY; the pipe that carries it here may lag the socket.
    await waitUntil(() => flooded().length > 0, { what: 'a flood line' });
    const lines = flooded();
    expect(lines.length).toBeLessThanOrEqual(CLIENT_FAULT_LOG.linesPerInterval);
  });

  it('an unpaced PING flood (acks never read in time) is cut by nghttp2 itself', async () => {
    let raw: RawH2 | undefined;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      const ping = frame(FRAME.PING, 0, 0, Buffer.alloc(8));
      for (let i = 0; i < 200 && !raw.closed; i++)
        await raw.write(Buffer.concat(Array.from({ length: 100 }, () => ping)));
      await sleep(200);
    });
    expect(raw!.goaway !== undefined || raw!.closed).toBe(true);
    raw!.close();
    expectBounded(r);
  });

  it('a CONTINUATION flood (CVE-2024-27316 class) is cut at the header list bound', async () => {
    let raw: RawH2 | undefined;
    let written = 0;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      await raw.write(frame(FRAME.HEADERS, 0 /* no END_HEADERS */, 1, getHeaders('/health/live')));
      // Each CONTINUATION adds a 4 KiB header field; END_HEADERS never comes.
      const field = Buffer.concat([
        Buffer.from([0x00, 0x01, 0x78, 0x7f, 0x81, 0x1f]),
        Buffer.alloc(4096 - 6 + 0, 0x61),
      ]);
      const continuation = frame(FRAME.CONTINUATION, 0, 1, field);
      for (let i = 0; i < 50_000 && !raw.closed && raw.goaway === undefined; i++) {
        if (!(await raw.write(continuation))) break;
        written += continuation.length;
      }
      await sleep(300);
    });
    // The server stopped it long before 200 MiB of header block: GOAWAY or a closed connection.
    expect(raw!.goaway !== undefined || raw!.closed).toBe(true);
    expect(written).toBeLessThan(16 * MiB);
    raw!.close();
    expectBounded(r);
  });

  it('an empty DATA frame flood ends the session, counted as a session error', async () => {
    const before = await metric(gw, 'arkvory_http2_session_errors_total');
    let raw: RawH2 | undefined;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      // A PUT that never ends, then empty DATA frames without END_STREAM.
      const put = Buffer.concat([Buffer.from([0x42, 3]), Buffer.from('PUT'), getHeaders('/health/live').subarray(1)]);
      await raw.write(frame(FRAME.HEADERS, 4 /* END_HEADERS */, 1, put));
      const empty = frame(FRAME.DATA, 0, 1);
      for (let i = 0; i < 200 && !raw.closed && raw.goaway === undefined; i++)
        await raw.write(Buffer.concat(Array.from({ length: 100 }, () => empty)));
      await sleep(200);
    });
    expect(raw!.goaway !== undefined || raw!.closed).toBe(true);
    raw!.close();
    expectBounded(r);
    expect(await metric(gw, 'arkvory_http2_session_errors_total')).toBeGreaterThan(before);
  });

  it('too many concurrent streams: past 100, refused streams or GOAWAY PROTOCOL_ERROR (the limit was acknowledged)', async () => {
    let raw: RawH2 | undefined;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      await sleep(100);
      // Downloads of a 3 MiB file that never open their flow-control window hold their streams open.
      const get = getHeaders(`${artifact}/content`, `Bearer ${owner.key}`);
      const frames: Buffer[] = [];
      for (let id = 1; id < 2 * 400; id += 2)
        frames.push(frame(FRAME.HEADERS, 5 /* END_STREAM|END_HEADERS */, id, get));
      await raw.write(Buffer.concat(frames));
      await sleep(1000);
    });
    const refused = raw!.resets.filter((code) => code === http2.constants.NGHTTP2_REFUSED_STREAM).length;
    expect(
      refused > 0 || raw!.goaway === http2.constants.NGHTTP2_PROTOCOL_ERROR,
      `resets ${raw!.resets.slice(0, 20)} goaway ${raw!.goaway}`,
    ).toBe(true);
    raw!.close();
    expectBounded(r);
  });

  it('WINDOW_UPDATE past a window of 2^31-1 ends the session with GOAWAY FLOW_CONTROL_ERROR, an increment of 0 with PROTOCOL_ERROR', async () => {
    const { NGHTTP2_FLOW_CONTROL_ERROR, NGHTTP2_PROTOCOL_ERROR } = http2.constants;
    const get = frame(FRAME.HEADERS, 5 /* END_STREAM|END_HEADERS */, 1, getHeaders('/health/live'));
    const MAX = 0x7fffffff;
    // RFC 9113 §6.9.1 (overflow) and §6.9 (increment 0). A stream's error may be the connection's
    // (§5.4.1): nghttp2 ends the session for both, with the error's own code.
    const cases: Array<[string, Buffer[], number]> = [
      ['connection window overflow', [windowUpdate(0, MAX)], NGHTTP2_FLOW_CONTROL_ERROR],
      ['stream window overflow', [get, windowUpdate(1, MAX), windowUpdate(1, MAX)], NGHTTP2_FLOW_CONTROL_ERROR],
      ['connection increment 0', [windowUpdate(0, 0)], NGHTTP2_PROTOCOL_ERROR],
      ['stream increment 0', [get, windowUpdate(1, 0)], NGHTTP2_PROTOCOL_ERROR],
    ];
    for (const [name, frames, code] of cases) {
      const raw = await RawH2.open(gw.port);
      await raw.write(Buffer.concat(frames));
      await waitUntil(() => raw.goaway !== undefined, { what: `GOAWAY for ${name}`, timeoutMs: 5000 });
      expect(raw.goaway, name).toBe(code);
      raw.close();
    }
    expect((await h2Request(gw.https, '/health/live')).status).toBe(200);
  });

  it('a WINDOW_UPDATE flood (a million valid frames) costs CPU in step with its bytes, no memory, and no other client its answers', async () => {
    let raw: RawH2 | undefined;
    const FRAMES = 1_000_000;
    let sent = 0;
    const r = await underAttack(gw, async () => {
      raw = await RawH2.open(gw.port);
      // A stream that closes at once: its id's updates are ignored, the connection's add 1 each.
      await raw.write(frame(FRAME.HEADERS, 5, 1, getHeaders('/health/live')));
      const batch = Buffer.concat(Array.from({ length: 500 }, (_, i) => windowUpdate(i % 2 === 0 ? 0 : 1, 1)));
      while (sent < FRAMES && (await raw.write(batch))) sent += 500;
      // Every frame read once the PING sent after them is answered.
      await raw.write(frame(FRAME.PING, 0, 0, Buffer.alloc(8)));
      await waitUntil(() => raw!.pingAcks > 0 || raw!.closed, { what: 'the PING after the flood answered' });
    });
    // Valid frames: the session stays (nghttp2 has no budget for them, nor does node:http2 report them).
    expect(raw!.goaway, `closed ${raw!.closed}`).toBeUndefined();
    expect(sent).toBe(FRAMES);
    raw!.close();
    expectBounded(r);
    // Measured: 70 ms of the gateway's CPU for the million (13 MB), RSS +4 MiB.
    expect(r.cpuMs).toBeLessThan(1500);
  });

  it('DATA past a declared content-length resets that upload alone (RST_STREAM PROTOCOL_ERROR): nothing stored, the connection and its other streams go on', async () => {
    const put = await h2Request(gw.https, artifact, { method: 'PUT', headers: bearer(owner.key), body: payload });
    expect([200, 201]).toContain(put.status);
    const before = await metric(gw, 'arkvory_http2_stream_resets_sent_total{reason="malformed"}');
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    let goaway: number | undefined;
    session.on('goaway', (code) => (goaway = code));
    // A download in progress on the same connection, not read until the uploads are done.
    const download = session.request({ ':path': `${artifact}/content`, ...bearer(owner.key) });
    download.on('error', () => {});
    download.pause();
    await new Promise((resolve) => download.once('response', resolve));
    const target = `/api/v1/repositories/${REPO}/artifacts/overrun.bin`;
    // The declared length reached in a DATA frame of its own, then more; and a first frame already past it.
    for (const [first, extra] of [
      [1000, 500],
      [1500, 0],
    ] as const) {
      const upload = session.request({
        ':method': 'PUT',
        ':path': target,
        'content-length': '1000',
        ...bearer(owner.key),
      });
      upload.on('error', () => {});
      let answered: unknown;
      upload.on('response', (h) => (answered = h[':status']));
      await new Promise((resolve) => upload.write(Buffer.alloc(first, 0x61), resolve));
      upload.end(Buffer.alloc(extra, 0x62));
      await new Promise((resolve) => upload.once('close', resolve));
      expect([upload.rstCode, answered, goaway], `${first}+${extra}`).toEqual([
        http2.constants.NGHTTP2_PROTOCOL_ERROR,
        undefined,
        undefined,
      ]);
    }
    // The other stream finishes byte-exact and the connection takes new requests.
    const chunks: Buffer[] = [];
    download.on('data', (c: Buffer) => chunks.push(c));
    download.resume();
    await new Promise((resolve) => download.once('end', resolve));
    expect(sha256(Buffer.concat(chunks))).toBe(sha256(payload));
    expect((await h2Request(gw.https, `${target}/content`, { session, headers: bearer(owner.key) })).status).toBe(404);
    expect(goaway).toBeUndefined();
    // What the uploads held is let go: their slots and temporaries (an upload streams into one under tmp/).
    const temporaries = async () =>
      (await readdir(path.join(gw.dataDir, 'tmp'), { recursive: true, withFileTypes: true }).catch(() => [])).filter(
        (e) => e.isFile(),
      ).length;
    await waitUntil(
      async () => (await temporaries()) === 0 && (await metric(gw, 'arkvory_admission_active{kind="upload"}')) === 0,
      { what: 'the uploads’ slots and temporaries to be let go' },
    );
    session.close();
    expect(await metric(gw, 'arkvory_http2_stream_resets_sent_total{reason="malformed"}')).toBe(before + 2);
  });

  it('header fields holding CR, LF or NUL never reach a handler: dropped by node:http2, never a line of their own, never authorizing', async () => {
    /** An HPACK literal field never indexed, name and value as given (no client-side checks). */
    const field = (name: string, value: string): Buffer => {
      expect(value.length).toBeLessThan(127);
      return Buffer.concat([
        Buffer.from([0x10, name.length]),
        Buffer.from(name),
        Buffer.from([value.length]),
        Buffer.from(value, 'latin1'),
      ]);
    };
    const target = `${artifact}/content`;
    const key = `Bearer ${owner.key}`;
    const cases: Array<[string, string]> = [
      ['x-note', `a\r\nauthorization: ${key}`],
      ['x-note', `a\nauthorization: ${key}`],
      ['authorization', `${key}\r\nx-injected: 1`],
      ['authorization', `${key}\r`],
      ['authorization', `${key}\0`],
      ['x-request-id', 'id\r\nx-injected: 1'],
    ];
    const UNAUTHORIZED = 'arkvory_http_client_faults_total{code="unauthorized"}';
    const faults = await metric(gw, UNAUTHORIZED);
    const from = gw.logLines().length;
    const answered: string[] = [];
    for (const [name, value] of cases) {
      const raw = await RawH2.open(gw.port);
      await raw.write(frame(FRAME.HEADERS, 5, 1, Buffer.concat([getHeaders(target), field(name, value)])));
      await waitUntil(() => raw.answered.has(1) || raw.resetStreams.has(1) || raw.goaway !== undefined, {
        what: `an answer to ${JSON.stringify(value)}`,
      });
      // RFC 9113 §8.2.1 asks for a reset (PROTOCOL_ERROR); node:http2 drops the field instead (docs/tls.md).
      if (raw.answered.has(1)) answered.push(value);
      else
        expect(raw.resetStreams.get(1) ?? raw.goaway, JSON.stringify(value)).toBe(
          http2.constants.NGHTTP2_PROTOCOL_ERROR,
        );
      raw.close();
    }
    // Each answered as a request without the field: 401 for want of credentials (counted as a
    // client fault: its lines are budgeted), never served to the key's principal.
    await waitUntil(async () => (await metric(gw, UNAUTHORIZED)) >= faults + answered.length, {
      what: `${answered.length} answers 401`,
    });
    expect(await metric(gw, UNAUTHORIZED)).toBe(faults + answered.length);
    const served = gw
      .logLines()
      .slice(from)
      .filter((l) => l.msg === 'request' && (Number(l.status) < 400 || l.principal !== undefined));
    expect(served.filter((l) => !String(l.route).startsWith('/health/') && l.route !== '/metrics')).toEqual([]);
    expect(JSON.stringify(gw.logLines().slice(from))).not.toMatch(/injected|\\r|\\n|\\u0000/);
  });
});

describe('HTTP/2 streams are transfers: admission, reset, flow control', () => {
  let gw: GatewayProcess & { https: string };
  let reader: { key: string };
  beforeAll(async () => {
    // Paced per principal, so four downloads hold their slots for seconds.
    gw = await startH2Gateway({ ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(256 * KiB) });
    const put = await h2Request(gw.https, artifact, { method: 'PUT', headers: bearer(owner.key), body: payload });
    expect([200, 201]).toContain(put.status);
    reader = await createServiceAccount(db.pool, { scopes: ['read'], grants: { [REPO]: 'read' } });
  });
  afterAll(() => gw.stop());

  async function ready(): Promise<{ active: number; queued: number }> {
    const r = await h2Request(gw.https, '/health/ready', { headers: bearer(reader.key) });
    const { active, queued } = JSON.parse(r.body.toString()).transfers.downloads;
    return { active, queued };
  }

  /** Four downloads of the reader on `session`, holding their slots, and a fifth queued behind them. */
  async function fourAndOneQueued(session: http2.ClientHttp2Session) {
    const open = (): { stream: http2.ClientHttp2Stream; firstByte: Promise<number> } => {
      const started = performance.now();
      const stream = session.request({ ':path': `${artifact}/content`, ...bearer(reader.key) });
      stream.on('error', () => {});
      const firstByte = new Promise<number>((resolve) =>
        stream.once('data', () => resolve(performance.now() - started)),
      );
      stream.on('data', () => {});
      return { stream, firstByte };
    };
    const four = Array.from({ length: 4 }, open);
    await Promise.all(four.map((s) => s.firstByte));
    const fifth = open();
    let state = await ready();
    for (let i = 0; i < 40 && state.queued === 0; i++) {
      await sleep(50);
      state = await ready();
    }
    expect(state).toEqual({ active: 4, queued: 1 });
    return { four, fifth };
  }

  it('four streams of one principal on one connection are four transfers: the fifth waits; a reset frees its slot at once', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const { four, fifth } = await fourAndOneQueued(session);
    // The other streams of the connection go on: a health check on the same session answers at once.
    const started = performance.now();
    expect((await h2Request(gw.https, '/health/live', { session })).status).toBe(200);
    expect(performance.now() - started).toBeLessThan(1000);
    // A client reset of one download frees its slot: the fifth starts within a bound.
    const resetAt = performance.now();
    four[0]!.stream.close(http2.constants.NGHTTP2_CANCEL);
    await fifth.firstByte;
    expect(performance.now() - resetAt).toBeLessThan(1500);
    const state = await ready();
    expect(state.active).toBe(4);
    expect(state.queued).toBe(0);
    session.destroy();
    for (let i = 0; i < 40 && (await ready()).active > 0; i++) await sleep(50);
    expect((await ready()).active).toBe(0);
  });

  it('a client reset of a queued stream ends its wait at once: the queue empties while the four still run', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const { fifth } = await fourAndOneQueued(session);
    let state = await ready();
    // The waiting stream, reset by its client: out of the queue at once, not when a slot frees
    // (the four take about 12 s at 256 KiB/s each).
    fifth.stream.close(http2.constants.NGHTTP2_CANCEL);
    const resetAt = performance.now();
    for (let i = 0; i < 20 && state.queued > 0; i++) {
      await sleep(50);
      state = await ready();
    }
    expect(state).toEqual({ active: 4, queued: 0 });
    expect(performance.now() - resetAt).toBeLessThan(1500);
    session.destroy();
    for (let i = 0; i < 40 && (await ready()).active > 0; i++) await sleep(50);
    expect((await ready()).active).toBe(0);
  });

  it('flow control is the backpressure: a stream not read holds about its window; another on the connection completes', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const stalled = session.request({ ':path': `${artifact}/content`, ...bearer(owner.key) });
    stalled.on('error', () => {});
    stalled.pause();
    await new Promise((resolve) => stalled.once('response', resolve));
    await sleep(500);
    // The client's buffered bytes are bounded by the stream window (64 KiB by default) plus a frame.
    expect(stalled.readableLength).toBeLessThanOrEqual(64 * KiB + 16 * KiB);
    const other = await h2Request(gw.https, `${artifact}/content`, { session, headers: bearer(owner.key) });
    expect(sha256(other.body)).toBe(sha256(payload));
    stalled.close(http2.constants.NGHTTP2_CANCEL);
    session.close();
  });
});

describe('HTTP/2 sessions, streams, idle GOAWAYs and resets sent are counted (/metrics)', () => {
  let gw: GatewayProcess & { https: string };
  /** A reader whose downloads a group ceiling paces at 256 KiB/s: its 3 MiB answer lasts about 12 s. */
  let paced: { key: string };
  beforeAll(async () => {
    paced = await createServiceAccount(db.pool, { name: 'h2-paced', grants: { [REPO]: 'read' } });
    for (const args of [
      ['groups', 'set', 'h2-paced-group', '--download', String(256 * KiB)],
      ['groups', 'add', 'h2-paced-group', 'h2-paced'],
    ]) {
      const out = await runCli(args, { ARKVORY_DATABASE_URL: db.url });
      expect(out.code, out.stderr).toBe(0);
    }
    gw = await startH2Gateway({
      ARKVORY_KEEPALIVE_TIMEOUT_SECONDS: '1',
      ARKVORY_SEND_TIMEOUT_SECONDS: '2',
      ARKVORY_ADMISSION_WAIT_SECONDS: '1',
      ARKVORY_BODY_TIMEOUT_SECONDS: '2',
      ARKVORY_USAGE_STATS_FLUSH_SECONDS: '1',
    });
    const put = await h2Request(gw.https, artifact, { method: 'PUT', headers: bearer(owner.key), body: payload });
    expect([200, 201]).toContain(put.status);
  });
  afterAll(() => gw.stop());

  /** One scrape (its own session and stream): series → value. */
  async function scrape(): Promise<(series: string) => number> {
    const text = (await h2Request(gw.https, '/metrics')).body.toString();
    return (series) => {
      for (const line of text.split('\n'))
        if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
      return 0;
    };
  }

  it('a session and its streams are counted while open; idle past the keep-alive timeout, it gets GOAWAY (idle)', async () => {
    const was = await scrape();
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const goaway = new Promise<number>((resolve) => session.once('goaway', resolve));
    // Held open: a download the client does not read yet.
    const held = session.request({ ':path': `${artifact}/content`, ...bearer(owner.key) });
    held.pause();
    const heldHead = await new Promise<http2.IncomingHttpHeaders>((resolve) => held.once('response', resolve));
    expect(heldHead[':status']).toBe(200);
    for (let i = 0; i < 3; i++) expect((await h2Request(gw.https, '/health/live', { session })).status).toBe(200);
    const during = await scrape();
    // This session and the scrape's own; its held stream and the scrape's.
    expect(during('arkvory_http2_open_sessions')).toBeGreaterThanOrEqual(2);
    expect(during('arkvory_http2_open_streams')).toBeGreaterThanOrEqual(2);
    // This session and the two scrapes; the held stream, three health checks and the scrape.
    expect(during('arkvory_http2_sessions_total') - was('arkvory_http2_sessions_total')).toBeGreaterThanOrEqual(2);
    expect(during('arkvory_http2_streams_total') - was('arkvory_http2_streams_total')).toBe(5);
    held.resume();
    await new Promise((resolve) => held.once('end', resolve));
    expect(await goaway).toBe(http2.constants.NGHTTP2_NO_ERROR);
    const now = await scrape();
    expect(now('arkvory_http2_goaway_sent_total{reason="idle"}')).toBeGreaterThan(
      was('arkvory_http2_goaway_sent_total{reason="idle"}'),
    );
    session.destroy();
  });

  it('a download the client stops reading is reset (CANCEL) after the send timeout, counted as send_timeout', async () => {
    const was = await scrape();
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const stalled = session.request({ ':path': `${artifact}/content`, ...bearer(owner.key) });
    stalled.on('error', () => {});
    stalled.pause();
    const closed = new Promise<number>((resolve) => stalled.once('close', () => resolve(stalled.rstCode!)));
    expect(await closed).toBe(http2.constants.NGHTTP2_CANCEL);
    const now = await scrape();
    expect(
      now('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}') -
        was('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}'),
    ).toBe(1);
    // The front door's own reset is not the client's.
    expect(now('arkvory_http2_stream_resets_received_total')).toBe(was('arkvory_http2_stream_resets_received_total'));
    session.destroy();
  });

  const statusOf = (stream: http2.ClientHttp2Stream) =>
    new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
  const closeCodeOf = (stream: http2.ClientHttp2Stream) =>
    new Promise<number>((resolve) => stream.once('close', () => resolve(stream.rstCode!)));

  it('a download the client resets with NO_ERROR before its end is counted as a reset received, as with CANCEL', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const received = 'arkvory_http2_stream_resets_received_total';
    for (const code of [http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_NO_ERROR]) {
      // A reset with NO_ERROR counts only when it arrives before the gateway ended its answer: the
      // paced reader's answer lasts seconds, so it always does (an unpaced 3 MiB could all be handed
      // over first on a loaded machine).
      let counted = 0;
      for (let attempt = 0; attempt < 3 && counted === 0; attempt++) {
        const was = await scrape();
        const download = session.request({ ':path': `${artifact}/content`, ...bearer(paced.key) });
        download.on('error', () => {});
        await new Promise((resolve) => download.once('data', resolve));
        download.close(code);
        let now = await scrape();
        for (let i = 0; i < 20 && now(received) === was(received); i++) {
          await sleep(50);
          now = await scrape();
        }
        counted = now(received) - was(received);
      }
      expect(counted, `code ${code}`).toBe(1);
    }
    session.destroy();
  });

  it('an upload whose body stalls gets 408, then RST_STREAM NO_ERROR (body_timeout); the gateway stays idle and responsive', async () => {
    const was = await scrape();
    const pid = gw.child.pid!;
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const stalled = session.request(
      {
        ':method': 'PUT',
        ':path': `/api/v1/repositories/${REPO}/artifacts/stalled.bin`,
        'content-length': '1000',
        ...bearer(owner.key),
      },
      { endStream: false },
    );
    stalled.on('error', () => {});
    stalled.write(Buffer.alloc(10));
    const status = statusOf(stalled);
    const body: Buffer[] = [];
    stalled.on('data', (c: Buffer) => body.push(c));
    const closeCode = closeCodeOf(stalled);
    expect(await status).toBe(408);
    expect(await closeCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    expect(Buffer.concat(body).toString()).toContain('"request_timeout"');
    // Nothing left running: a second later the process spent a small part of that second on CPU,
    // and another client is answered at once.
    const before = await usage(pid);
    await sleep(1000);
    const after = await usage(pid);
    expect(after.cpuMs - before.cpuMs).toBeLessThan(300);
    expect(after.rss - before.rss).toBeLessThan(64 * MiB);
    const started = performance.now();
    expect((await h2Request(gw.https, '/health/live')).status).toBe(200);
    expect(performance.now() - started).toBeLessThan(1000);
    const now = await scrape();
    expect(
      now('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}') -
        was('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}'),
    ).toBe(1);
    session.destroy();
  });

  it('a body that stalls after the answer began is cut (CANCEL) at the body timeout and counted as body_timeout, not send_timeout', async () => {
    const was = await scrape();
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    // A download that announces a body it never finishes: the gateway answers without reading it,
    // so the answer is under way (its head out, its window full: the client reads nothing) while
    // the armed timeout is still the body's.
    const stalled = session.request(
      { ':path': `${artifact}/content`, 'content-length': '1000', ...bearer(owner.key) },
      { endStream: false },
    );
    stalled.on('error', () => {});
    stalled.pause();
    stalled.write(Buffer.alloc(10));
    const status = statusOf(stalled);
    const closeCode = closeCodeOf(stalled);
    expect(await status).toBe(200);
    expect(await closeCode).toBe(http2.constants.NGHTTP2_CANCEL);
    const now = await scrape();
    const delta = (series: string) => now(series) - was(series);
    expect(delta('arkvory_http_client_timeouts_total{phase="body"}')).toBe(1);
    expect(delta('arkvory_http_client_timeouts_total{phase="send"}')).toBe(0);
    expect(delta('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}')).toBe(1);
    expect(delta('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}')).toBe(0);
    expect(
      gw.logLines().some((l) => l.code === 'client_timeout' && l.phase === 'request_body' && l.protocol === 'h2'),
    ).toBe(true);
    session.destroy();
  });

  it('streams answered without a request (CONNECT 405, an unknown Expect 417) are reset after the answer; the session still idles out', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const goaway = new Promise<number>((resolve) => session.once('goaway', resolve));
    // Both left half-open by the client (no END_STREAM): only the server can end them.
    const connect = session.request({ ':method': 'CONNECT', ':authority': 'example.org:443' }, { endStream: false });
    const oddExpect = session.request(
      { ':path': `${artifact}/content`, expect: 'something-else', ...bearer(owner.key) },
      { endStream: false },
    );
    for (const stream of [connect, oddExpect]) {
      stream.on('error', () => {});
      stream.resume();
    }
    const codes = Promise.all([closeCodeOf(connect), closeCodeOf(oddExpect)]);
    expect(await Promise.all([statusOf(connect), statusOf(oddExpect)])).toEqual([405, 417]);
    expect(await codes).toEqual([http2.constants.NGHTTP2_NO_ERROR, http2.constants.NGHTTP2_NO_ERROR]);
    // With no stream left open, the keep-alive timeout (1 s) ends the session.
    const idle = await Promise.race([goaway, sleep(5000).then(() => 'no GOAWAY within 5 s')]);
    expect(idle).toBe(http2.constants.NGHTTP2_NO_ERROR);
    session.destroy();
  });

  it('an upload the client resets is counted in usage by the bytes that arrived, not its declared length', async () => {
    const uploader = await createServiceAccount(db.pool, { grants: { [REPO]: 'write' } });
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const upload = session.request(
      {
        ':method': 'PUT',
        ':path': `/api/v1/repositories/${REPO}/artifacts/reset-upload.bin`,
        'content-length': '1000000',
        ...bearer(uploader.key),
      },
      { endStream: false },
    );
    upload.on('error', () => {});
    const closed = closeCodeOf(upload);
    upload.write(Buffer.alloc(1000));
    await sleep(300);
    upload.close(http2.constants.NGHTTP2_CANCEL);
    await closed;
    const bytesUp = async () =>
      (
        await db.pool.query<{ bytes_up: string }>(
          'SELECT bytes_up::bigint FROM arkvory_usage_principal_days WHERE principal_id = $1',
          [uploader.principalId],
        )
      ).rows[0]?.bytes_up;
    let counted: string | undefined;
    for (let i = 0; i < 60 && counted === undefined; i++) {
      await sleep(100);
      counted = await bytesUp();
    }
    expect(Number(counted)).toBeGreaterThanOrEqual(1000);
    expect(Number(counted)).toBeLessThan(100_000);
    session.destroy();
  });

  it("a light principal's download waiting its turn behind a weightier one is paced, not reset at the send timeout", async () => {
    // Both in a group paced at 640 KiB/s (quanta of 64 KiB, one each 0.1 s): at weights 40:1 the
    // light stream's next quantum comes about 4.1 s after its last, twice the 2 s send timeout.
    const heavy = await createServiceAccount(db.pool, { name: 'h2-heavy', grants: { [REPO]: 'read' } });
    const light = await createServiceAccount(db.pool, { name: 'h2-light', grants: { [REPO]: 'read' } });
    for (const args of [
      ['groups', 'set', 'h2-weighted', '--download', String(640 * KiB)],
      ['groups', 'add', 'h2-weighted', 'h2-heavy'],
      ['groups', 'add', 'h2-weighted', 'h2-light'],
      ['principals', 'weight', 'h2-heavy', '40'],
    ]) {
      const out = await runCli(args, { ARKVORY_DATABASE_URL: db.url });
      expect(out.code, out.stderr).toBe(0);
    }
    const small = randomContent(192 * KiB);
    const smallPath = `/api/v1/repositories/${REPO}/artifacts/light.bin`;
    expect(
      (await h2Request(gw.https, smallPath, { method: 'PUT', headers: bearer(owner.key), body: small })).status,
    ).toBe(201);
    const timeoutsBefore = gw.logLines().filter((l) => l.code === 'client_timeout').length;
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const heavyStreams = Array.from({ length: 3 }, () => {
      const stream = session.request({ ':path': `${artifact}/content`, ...bearer(heavy.key) });
      stream.on('error', () => {});
      return stream;
    });
    await new Promise((resolve) => heavyStreams[0]!.once('data', resolve));
    for (const stream of heavyStreams) stream.resume();
    const started = performance.now();
    const answer = await h2Request(gw.https, `${smallPath}/content`, { headers: bearer(light.key) });
    expect({ status: answer.status, sha256: sha256(answer.body) }).toEqual({ status: 200, sha256: sha256(small) });
    // It waited its turns: longer than the send timeout at least once.
    expect(performance.now() - started).toBeGreaterThan(4000);
    expect(gw.logLines().filter((l) => l.code === 'client_timeout')).toHaveLength(timeoutsBefore);
    session.destroy();
  });
});

describe('the router over HTTP/2', () => {
  it('serves HTTP/2 clients on its TLS listener and forwards HTTP/1.1 heads (no pseudo-headers) to a gateway', async () => {
    const backend = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const router = await startH2Gateway({
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: backend.url,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
      ARKVORY_TLS_HSTS: 'max-age=300',
    });
    try {
      const target = `/api/v1/repositories/${REPO}/artifacts/routed.bin`;
      const body = payload.subarray(0, 200_000);
      const put = await h2Request(router.https, target, { method: 'PUT', headers: bearer(owner.key), body });
      expect([200, 201], put.body.toString()).toContain(put.status);
      const get = await h2Request(router.https, `${target}/content`, { headers: bearer(owner.key) });
      expect(get.status).toBe(200);
      expect(sha256(get.body)).toBe(sha256(body));
      expect(get.headers.connection).toBeUndefined();
      const range = await h2Request(router.https, `${target}/content`, {
        headers: { ...bearer(owner.key), range: 'bytes=10-19' },
      });
      expect(range.status).toBe(206);
      expect(range.body.equals(body.subarray(10, 20))).toBe(true);
      const { stdout } = await run('curl', [
        '-sS',
        '--http2',
        '--cacert',
        ca.certFile,
        '-H',
        `Authorization: Bearer ${owner.key}`,
        '-o',
        '/dev/null',
        '-w',
        '%{http_code} %{http_version}',
        `${router.https}${target}/content`,
      ]);
      expect(stdout).toBe('200 2');
      // The router's own ARKVORY_TLS_HSTS, once, on the answers it relays (a success, the gateway's
      // 404) and on its own (/health/live), over HTTP/2 and HTTP/1.1.
      for (const version of ['2', '1.1'] as const)
        for (const [url, status] of [
          [`${router.https}${target}/content`, 200],
          [`${router.https}/no/such/route`, 404],
          [`${router.https}/health/live`, 200],
        ] as const) {
          const head = await curlHead(url, ca.certFile, version, ['-H', `Authorization: Bearer ${owner.key}`]);
          const sts = head.headers['strict-transport-security'];
          expect([head.status, sts, head.counts['strict-transport-security']], `${url} HTTP/${version}`).toEqual([
            status,
            'max-age=300',
            1,
          ]);
        }
    } finally {
      await router.stop();
      await backend.stop();
    }
  });
});
