/**
 * The send budget of an HTTP/2 session (front-door/http2-send-budget.ts), against a real TLS gateway
 * and node:http2 clients that announce a zero stream window and never read: what their answers hold
 * is bounded per connection (not a streamed body's buffers per stream, nor an answer written whole
 * per stream: handlers past the budget wait before they run), the answers that stall are
 * reset at the send timeout even while the client keeps its session busy with PINGs, and a
 * well-behaved client, on its own connection or beside a stalled stream on the same one, is served
 * throughout.
 */
import { readFile } from 'node:fs/promises';
import http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../../test/support/auth.ts';
import { randomContent, sha256 } from '../../../test/support/content.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  samplePeak,
  waitUntil,
} from '../../../test/harness/index.ts';
import { type Http2Answer, http2Request } from '../../../test/support/http2-request.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
const REPO = 'h2budget';
const db = useTestDatabase();
let ca: CertificateAuthority;
let certFile: string;
let keyFile: string;
let owner: { key: string };
const payload = randomContent(8 * MiB + 123);
const content = `/api/v1/repositories/${REPO}/artifacts/big.bin/content`;

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-h2-budget-');
  ca = await createCertificateAuthority(dir);
  ({ certFile, keyFile } = await issueServerCertificate(ca, dir));
  await createRepository(db.pool, REPO);
  owner = await createServiceAccount(db.pool, { name: 'h2-budget-owner', grants: { [REPO]: 'write' } });
});

type H2Gateway = GatewayProcess & { https: string };

/** A TLS gateway (h2) with `env`, serving, with the test artifact uploaded. */
async function startH2Gateway(env: Record<string, string>): Promise<H2Gateway> {
  const gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_TLS_CERT_FILE: certFile, ARKVORY_TLS_KEY_FILE: keyFile, ...env },
    waitFor: 'none',
  });
  const https = `https://127.0.0.1:${gw.port}`;
  await waitUntil(async () => (await request(https, '/health/live').catch(() => undefined))?.status === 200, {
    what: 'the gateway to serve HTTP/2',
    timeoutMs: 40_000,
    process: gw,
  });
  const put = await request(https, `/api/v1/repositories/${REPO}/artifacts/big.bin`, {
    method: 'PUT',
    headers: bearer(owner.key),
    body: payload,
  });
  expect([200, 201]).toContain(put.status);
  return Object.assign(gw, { https });
}

/** One request, read to its end, on `session` or a new connection. */
function request(
  origin: string,
  target: string,
  options: Parameters<typeof http2Request>[3] = {},
): Promise<Http2Answer> {
  return http2Request(origin, ca.certPem, target, options);
}

/** A scrape of `/metrics`: series → value (0 when absent). */
async function scrape(gw: H2Gateway): Promise<(series: string) => number> {
  const text = (await request(gw.https, '/metrics')).body.toString();
  return (series) => {
    for (const line of text.split('\n'))
      if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
    return 0;
  };
}

async function rss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) * KiB;
}

/**
 * A full garbage collection in the gateway (its inspector, opened on a free port at start): what it
 * holds then is what its live objects take, not how much garbage its heap let pile up meanwhile.
 */
async function collectGarbage(gw: GatewayProcess): Promise<void> {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(gw.stderr())?.[1];
  if (url === undefined) throw new Error('the gateway has no inspector open');
  const socket = new WebSocket(url);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  try {
    await new Promise<void>((resolve, reject) => {
      socket.onmessage = (event) => {
        if ((JSON.parse(String(event.data)) as { id?: number }).id === 1) resolve();
      };
      socket.onerror = reject;
      socket.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' }));
    });
  } finally {
    socket.close();
  }
}

/**
 * A client that announces a zero stream window (it takes no DATA byte) and opens `streams` requests
 * on `target`; `answered.heads` counts the answers whose head arrived (HEADERS are not flow-controlled).
 */
function zeroWindowClient(gw: H2Gateway, streams: number, target: string, headers: Record<string, string> = {}) {
  const session = http2.connect(gw.https, { ca: ca.certPem, settings: { initialWindowSize: 0 } });
  session.on('error', () => {});
  const closeCodes: Promise<number>[] = [];
  const answered = { heads: 0 };
  for (let i = 0; i < streams; i++) {
    const stream = session.request({ ':path': target, ...headers });
    stream.on('error', () => {});
    stream.once('response', () => answered.heads++);
    closeCodes.push(new Promise((resolve) => stream.once('close', () => resolve(stream.rstCode ?? -1))));
  }
  return { session, closeCodes, answered };
}

describe('HTTP/2 send budget: what a client that does not read holds', () => {
  let gw: H2Gateway;
  beforeAll(async () => {
    // A principal allowed as many downloads as a connection has streams: admission does not bound them.
    gw = await startH2Gateway({ ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '2000', ARKVORY_MAX_DOWNLOADS: '2000' });
  });
  // One writer per database: stopped before the next describe starts its own.
  afterAll(() => gw.stop());

  it('100 downloads on each of 10 zero-window connections hold about the budget per connection, not a ring per stream; other clients are served', async () => {
    const pid = gw.child.pid!;
    // Warm: the first downloads' code paths and buffers, then the resting size.
    for (let i = 0; i < 3; i++)
      expect(sha256((await request(gw.https, content, { headers: bearer(owner.key) })).body)).toBe(sha256(payload));
    await sleep(500);
    const before = await rss(pid);
    const peak = samplePeak(() => rss(pid), 100);
    const clients = Array.from({ length: 10 }, () => zeroWindowClient(gw, 100, content, bearer(owner.key)));
    try {
      // Every stream reached its handler: the gateway holds what it will hold.
      await waitUntil(async () => (await scrape(gw))('arkvory_http2_open_streams') >= 1000, {
        what: 'the 1,000 streams to be open',
        timeoutMs: 30_000,
      });
      const during = await scrape(gw);
      // A well-behaved client on its own connection: a whole download and health checks, at once.
      const session = http2.connect(gw.https, { ca: ca.certPem });
      session.on('error', () => {});
      const started = performance.now();
      const download = await request(gw.https, content, { headers: bearer(owner.key), session });
      expect(sha256(download.body)).toBe(sha256(payload));
      for (let i = 0; i < 5; i++) expect((await request(gw.https, '/health/live', { session })).status).toBe(200);
      expect(performance.now() - started).toBeLessThan(10_000);
      session.close();
      await sleep(1000);
      const growth = (await peak.stop()) - before;
      // Before the budget each stream held its 512 KiB ring (about 150 MiB here); node:http2's own
      // state of 1,000 open streams is about 12 MiB (a bare server measured), the budget 10 MiB.
      expect(growth, `RSS grew ${(growth / MiB).toFixed(1)} MiB`).toBeLessThan(64 * MiB);
      expect(during('arkvory_http2_send_budget_waiting')).toBeGreaterThan(0);
      expect(during('arkvory_http2_send_budget_waits_total')).toBeGreaterThan(0);
    } finally {
      for (const c of clients) c.session.destroy();
      await peak.stop();
    }
  });

  it('70 downloads at once on one connection that reads them all complete: the answers in progress never keep a chunk waiting', async () => {
    const medium = randomContent(MiB + 17);
    const put = await request(gw.https, `/api/v1/repositories/${REPO}/artifacts/medium.bin`, {
      method: 'PUT',
      headers: bearer(owner.key),
      body: medium,
    });
    expect([200, 201]).toContain(put.status);
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    try {
      const target = `/api/v1/repositories/${REPO}/artifacts/medium.bin/content`;
      const downloads = await Promise.race([
        Promise.all(
          Array.from({ length: 70 }, () => request(gw.https, target, { headers: bearer(owner.key), session })),
        ),
        sleep(30_000).then(() => undefined),
      ]);
      expect(downloads, 'the downloads stopped').toBeDefined();
      for (const d of downloads!) expect(sha256(d.body)).toBe(sha256(medium));
    } finally {
      session.close();
    }
  });

  it('a stream the client does not read holds no more than the budget; the other streams of its connection go on', async () => {
    const session = http2.connect(gw.https, { ca: ca.certPem });
    session.on('error', () => {});
    const stalled = session.request({ ':path': content, ...bearer(owner.key) });
    stalled.on('error', () => {});
    stalled.pause();
    await new Promise((resolve) => stalled.once('response', resolve));
    await sleep(300);
    const started = performance.now();
    const [other, second] = await Promise.all([
      request(gw.https, content, { headers: bearer(owner.key), session }),
      request(gw.https, content, { headers: bearer(owner.key), session }),
    ]);
    expect(sha256(other.body)).toBe(sha256(payload));
    expect(sha256(second.body)).toBe(sha256(payload));
    for (let i = 0; i < 5; i++) expect((await request(gw.https, '/health/live', { session })).status).toBe(200);
    expect(performance.now() - started).toBeLessThan(10_000);
    stalled.close(http2.constants.NGHTTP2_CANCEL);
    session.close();
  });
});

describe('HTTP/2 send budget: answers written whole', () => {
  const CONNECTIONS = 64;
  const missing = `/api/v1/repositories/${REPO}/artifacts/missing.bin/content`;
  let gw: H2Gateway;
  /** The well-behaved client's own principal: the zero-window clients' limits are not its. */
  let reader: { key: string };
  beforeAll(async () => {
    // Admission does not answer the streams (a 429 is written at once): every one looks its name up.
    gw = await startH2Gateway({
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '10000',
      ARKVORY_MAX_DOWNLOADS: '10000',
      NODE_OPTIONS: '--inspect=127.0.0.1:0',
    });
    reader = await createServiceAccount(db.pool, { name: 'h2-budget-reader', grants: { [REPO]: 'read' } });
  });
  afterAll(() => gw.stop());

  it('100 small answers written whole on each of 64 zero-window connections: 32 handlers run per connection and the rest wait, so each holds under 0.95 MiB; other clients are served', async () => {
    const pid = gw.child.pid!;
    // Warm: the code paths, and the heap's spaces a burst of streams takes.
    for (let i = 0; i < 100; i++)
      expect((await request(gw.https, missing, { headers: bearer(owner.key) })).status).toBe(404);
    const warm = Array.from({ length: 16 }, () => zeroWindowClient(gw, 100, missing, bearer(owner.key)));
    await sleep(2000);
    for (const c of warm) c.session.destroy();
    await sleep(2000);
    await collectGarbage(gw);
    const before = await rss(pid);
    const clients: ReturnType<typeof zeroWindowClient>[] = [];
    try {
      // A 404 answer is a small JSON body written whole, after a catalog look-up: the handlers of a
      // burst of streams all wait on I/O before any answer is written.
      for (let i = 0; i < CONNECTIONS; i++) clients.push(zeroWindowClient(gw, 100, missing, bearer(owner.key)));
      await waitUntil(async () => (await scrape(gw))('arkvory_http2_open_streams') >= CONNECTIONS * 100, {
        what: 'the streams to be open',
        timeoutMs: 30_000,
      });
      // Each stream was handed to its handler or made to wait as it opened: 32 of each connection run.
      const during = await scrape(gw);
      // Once every handler that ran has written its answer, a full collection leaves what the
      // connections hold: not the garbage the burst left, nor what the client below costs.
      const heads = () => clients.reduce((n, c) => n + c.answered.heads, 0);
      await waitUntil(
        async () => heads() + (await scrape(gw))('arkvory_http2_send_budget_waiting') >= CONNECTIONS * 100,
        { what: 'every stream to be answered or waiting', timeoutMs: 30_000 },
      );
      await collectGarbage(gw);
      const perConnection = ((await rss(pid)) - before) / CONNECTIONS;
      // A well-behaved client on its own connection: 50 small answers at once, a whole download.
      const session = http2.connect(gw.https, { ca: ca.certPem });
      session.on('error', () => {});
      const started = performance.now();
      const answers = await Promise.all(
        Array.from({ length: 50 }, () => request(gw.https, missing, { headers: bearer(reader.key), session })),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(50).fill(404));
      const download = await request(gw.https, content, { headers: bearer(reader.key), session });
      expect(sha256(download.body)).toBe(sha256(payload));
      expect(performance.now() - started).toBeLessThan(10_000);
      session.close();
      // With every handler run, each connection held its 100 answers (1.1 to 1.2 MiB a connection
      // measured, about 10 KiB each); with 32 run and 68 waiting (about 3 KiB each), 0.6 to 0.8 MiB.
      expect(perConnection, `RSS grew ${(perConnection / KiB).toFixed(0)} KiB a connection`).toBeLessThan(0.95 * MiB);
      expect(during('arkvory_http2_send_budget_waiting')).toBe(CONNECTIONS * 68);
    } finally {
      for (const c of clients) c.session.destroy();
    }
  });
});

describe('HTTP/2 send budget: stalled answers are cut at the send timeout', () => {
  const SEND_TIMEOUT_S = 2;
  let gw: H2Gateway;
  beforeAll(async () => {
    gw = await startH2Gateway({
      ARKVORY_SEND_TIMEOUT_SECONDS: String(SEND_TIMEOUT_S),
      ARKVORY_BODY_TIMEOUT_SECONDS: String(SEND_TIMEOUT_S),
      ARKVORY_ADMISSION_WAIT_SECONDS: '1',
    });
  });

  it('100 answers a zero-window client never reads are all reset (CANCEL, send_timeout) within a few send timeouts, though it sends PINGs all along', async () => {
    const was = await scrape(gw);
    const { session, closeCodes } = zeroWindowClient(gw, 100, '/health/live');
    // Any frame the session sends pushes node:http2's own stream timeouts back: PING acks do.
    const pinger = setInterval(() => {
      if (!session.destroyed) session.ping(() => {});
    }, 200);
    const started = performance.now();
    try {
      // One to two send timeouts for the first 32 answers, as many again for each next 32 that
      // waited for the budget (four rounds): eight at most; the bound leaves room for a loaded
      // machine. With node:http2's timeouts alone, the stream whose answer node:http2 holds in its
      // queue is never reset while the PINGs go on.
      const codes = await Promise.race([
        Promise.all(closeCodes),
        sleep(14 * SEND_TIMEOUT_S * 1000).then(() => undefined),
      ]);
      const now = await scrape(gw);
      const reset =
        now('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}') -
        was('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}');
      expect(codes, `${reset} of 100 streams reset after ${Math.round(performance.now() - started)} ms`).toBeDefined();
      expect(new Set(codes)).toEqual(new Set([http2.constants.NGHTTP2_CANCEL]));
      expect(reset).toBe(100);
      expect(
        now('arkvory_http_client_timeouts_total{phase="send"}') -
          was('arkvory_http_client_timeouts_total{phase="send"}'),
      ).toBe(100);
      // The front door's own resets are not the client's.
      expect(now('arkvory_http2_stream_resets_received_total')).toBe(was('arkvory_http2_stream_resets_received_total'));
      // The streams were reset, not the connection.
      expect(session.destroyed).toBe(false);
    } finally {
      clearInterval(pinger);
      session.destroy();
    }
  });
});
