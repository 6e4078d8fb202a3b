/**
 * What one client can make the router hold upstream, through real router processes: pipelined
 * HTTP/1.1 requests are forwarded one after the other (never all at once), requests proxied at once
 * (HTTP/2 streams) are bounded with the descriptors (past it a counted 503), and the router's own
 * shortage of descriptors (its limit lowered under it) is its 503, never held against the gateway. An in-test HTTP server stands in for the
 * gateway (as in router-client-faults.int.test.ts), so its requests in flight can be counted exactly.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTempDir, problemLines, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  createCertificateAuthority,
  freeLoopbackPort,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';
import { answerHealthProbe } from '../../test/support/health-probe.ts';
import { OWN_FAILURE_LOG } from './proxy-handler.ts';
import { defaultMaxInFlight } from './router-server.ts';
import { CLIENT_FAULT_LOG } from '../../lib/log-budget.ts';

/** Requests the gateway is answering now, the most at once, and how long each answer waits. */
const gatewayLoad = { inFlight: 0, peak: 0, delayMs: 2 };
let gateway: http.Server;
let gatewayUrl: string;

beforeAll(async () => {
  gateway = http.createServer((req, res) => {
    if (answerHealthProbe(req, res)) return;
    gatewayLoad.inFlight++;
    gatewayLoad.peak = Math.max(gatewayLoad.peak, gatewayLoad.inFlight);
    // As a gateway does, an upload is answered once its body is in: an answer before would be an
    // early one, after which the router rightly closes the client's connection.
    req.resume();
    req.once('end', () =>
      setTimeout(() => {
        gatewayLoad.inFlight--;
        // The body names the request, so the client can check the order of its answers.
        const body = req.url ?? '';
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) }).end(body);
      }, gatewayLoad.delayMs),
    );
  });
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
  gatewayUrl = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
});

afterAll(async () => {
  gateway?.closeAllConnections();
  await new Promise((r) => gateway?.close(r));
});

/** A router in front of the stand-in gateway; with `descriptors`, run under that descriptor limit. */
async function startRouter(env: Record<string, string>, descriptors?: number, waitFor?: 'none') {
  const wrap = descriptors === undefined ? undefined : ['prlimit', `--nofile=${descriptors}:${descriptors}`, '--'];
  const metricsPort = await freeLoopbackPort();
  const router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: gatewayUrl,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_METRICS_PORT: String(metricsPort),
      ...env,
    },
    ...(wrap ? { wrap } : {}),
    ...(waitFor ? { waitFor } : {}),
    timeoutMs: 60_000,
  });
  const metric = async (line: RegExp): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    return Number(line.exec(text)?.[1] ?? Number.NaN);
  };
  return { router, metric };
}

/** Answers read off one connection in order: status and body of each (bodies by Content-Length). */
function readAnswers(socket: net.Socket, count: number): Promise<Array<{ status: number; body: string }>> {
  return new Promise((resolve, reject) => {
    const answers: Array<{ status: number; body: string }> = [];
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      for (;;) {
        const end = text.indexOf('\r\n\r\n');
        if (end === -1) break;
        const head = text.slice(0, end);
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (text.length < end + 4 + length) break;
        answers.push({ status: Number(head.slice(9, 12)), body: text.slice(end + 4, end + 4 + length) });
        text = text.slice(end + 4 + length);
      }
      if (answers.length >= count) resolve(answers);
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(answers));
  });
}

/** A connection to `port`, once established; an error before that rejects. */
function connect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

const content = (i: number) => `/api/v1/repositories/r/artifacts/a${i}/content`;

describe('router: pipelined requests on one connection', () => {
  let router: GatewayProcess;
  let metric: (line: RegExp) => Promise<number>;
  beforeAll(async () => {
    ({ router, metric } = await startRouter({ ARKVORY_MAX_CONNECTIONS: '50' }));
  }, 90_000);
  afterAll(() => router?.stop('SIGTERM'));

  it('500 pipelined GETs are forwarded one at a time and all answered in order, no gateway ejected', async () => {
    gatewayLoad.peak = 0;
    const N = 500;
    const socket = await connect(router.port);
    const answers = readAnswers(socket, N);
    let bytes = '';
    for (let i = 0; i < N; i++) bytes += `GET ${content(i)} HTTP/1.1\r\nHost: 127.0.0.1:${router.port}\r\n\r\n`;
    socket.write(bytes);
    const got = await answers;
    socket.destroy();
    expect(got.length).toBe(N);
    expect(got.filter((a) => a.status !== 200)).toEqual([]);
    expect(got.map((a) => a.body)).toEqual(Array.from({ length: N }, (_, i) => content(i)));
    // HTTP/1.1 answers in order anyway: the router holds the next request until the one before is answered.
    expect(gatewayLoad.peak).toBe(1);
    expect(await metric(/^arkvory_router_ejections_total (\d+)$/m)).toBe(0);
    expect(await metric(/^arkvory_router_gateways\{state="reads"\} (\d+)$/m)).toBe(1);
    // One request line per request, nothing at warn or above.
    expect(problemLines(router.logLines())).toEqual([]);
  }, 60_000);
  it('an upload pipelined between two GETs still gets its body through (the paused socket resumes for it)', async () => {
    const socket = await connect(router.port);
    const answers = readAnswers(socket, 3);
    const host = `Host: 127.0.0.1:${router.port}\r\n`;
    const body = 'x'.repeat(256 * 1024);
    socket.write(
      `GET ${content(0)} HTTP/1.1\r\n${host}\r\n` +
        `PUT /api/v1/repositories/r/artifacts/up HTTP/1.1\r\n${host}Content-Length: ${body.length}\r\n\r\n${body}` +
        `GET ${content(2)} HTTP/1.1\r\n${host}\r\n`,
    );
    const got = await answers;
    socket.destroy();
    expect(got.map((a) => [a.status, a.body])).toEqual([
      [200, content(0)],
      [200, '/api/v1/repositories/r/artifacts/up'],
      [200, content(2)],
    ]);
  }, 30_000);
});

describe('router: requests proxied at once are bounded with its descriptors', () => {
  // Over HTTP/2 one connection carries many requests, so the connection bound does not hold them:
  // the bound on requests in flight does (on HTTP/1.1 the connection bound, which fits the same
  // descriptors, is reached first).
  const DESCRIPTORS = 200;
  const bound = defaultMaxInFlight(DESCRIPTORS, true);
  let router: GatewayProcess;
  let metric: (line: RegExp) => Promise<number>;
  let ca: string;
  beforeAll(async () => {
    const dir = await makeTempDir('arkvory-router-h2-');
    const authority = await createCertificateAuthority(dir);
    const certificate = await issueServerCertificate(authority, dir);
    ca = authority.certPem;
    ({ router, metric } = await startRouter(
      { ARKVORY_TLS_CERT_FILE: certificate.certFile, ARKVORY_TLS_KEY_FILE: certificate.keyFile },
      DESCRIPTORS,
      'none',
    ));
    // Listening once an HTTP/2 request over TLS is answered (the harness waits over plain HTTP).
    const served = () =>
      h2Statuses(1, content).then(
        (answers) => answers[0]?.status === 200,
        () => false,
      );
    await waitUntil(served, {
      what: 'the TLS router to serve',
      timeoutMs: 30_000,
      process: router,
    });
  }, 90_000);
  afterAll(async () => {
    gatewayLoad.delayMs = 2;
    await router?.stop('SIGTERM');
  });

  /** `count` GETs at once as streams of one new HTTP/2 connection: each one's status, Retry-After and code. */
  function h2Statuses(
    count: number,
    path: (i: number) => string,
  ): Promise<Array<{ status: number; retryAfter: string | undefined; code: string }>> {
    return new Promise((resolve, reject) => {
      const session = http2.connect(`https://127.0.0.1:${router.port}`, { ca });
      session.on('error', reject);
      const answers = Array.from(
        { length: count },
        (_, i) =>
          new Promise<{ status: number; retryAfter: string | undefined; code: string }>((done, fail) => {
            const stream = session.request({ ':path': path(i) });
            let status = 0;
            let retryAfter: string | undefined;
            let body = '';
            stream.on('response', (headers) => {
              status = Number(headers[':status']);
              const value = headers['retry-after'];
              retryAfter = Array.isArray(value) ? value[0] : value;
            });
            stream.on('data', (d: Buffer) => (body += d.toString()));
            stream.on('end', () =>
              done({ status, retryAfter, code: status === 503 ? (JSON.parse(body) as { code: string }).code : '' }),
            );
            stream.on('error', fail);
          }),
      );
      Promise.all(answers).then(
        (all) => {
          session.close();
          resolve(all);
        },
        (err: unknown) => {
          session.destroy();
          reject(err);
        },
      );
    });
  }

  it(`past ${bound} requests in flight the next gets a fast 503 with Retry-After, counted`, async () => {
    gatewayLoad.delayMs = 1500;
    const extra = 8;
    // Over 8 connections: each session starts as many streams at once as its send budget allows
    // (front-door/http2-send-budget.ts), fewer than the bound.
    const sessions = 8;
    const perSession = Math.ceil((bound + extra) / sessions);
    const answers = (
      await Promise.all(
        Array.from({ length: sessions }, (_, s) =>
          h2Statuses(Math.min(perSession, bound + extra - s * perSession), (i) => content(s * perSession + i)),
        ),
      )
    ).flat();
    expect(answers.length).toBe(bound + extra);
    const refused = answers.filter((a) => a.status === 503);
    expect(answers.filter((a) => a.status === 200).length).toBe(bound);
    expect(refused.length).toBe(extra);
    expect(refused.every((a) => a.retryAfter === '1' && a.code === 'unavailable')).toBe(true);
    expect(await metric(/^arkvory_router_overloaded_total\{reason="in_flight"\} (\d+)$/m)).toBe(extra);
    expect(await metric(/^arkvory_router_requests_in_flight (\d+)$/m)).toBe(0);
    expect(problemLines(router.logLines())).toEqual([]);
    // A flood's refusals are not a line each: their request lines are bounded as client faults' are.
    await waitUntil(() => router.logLines().some((l) => l.msg === 'request' && l.status === 503), {
      what: 'a refused request line',
    });
    const refusedLines = router.logLines().filter((l) => l.msg === 'request' && l.status === 503);
    expect(refusedLines.length).toBeLessThanOrEqual(CLIENT_FAULT_LOG.linesPerInterval);
  }, 60_000);
});

describe("router: its own shortage of descriptors is not the gateway's failure", () => {
  const DESCRIPTORS = 150;
  let router: GatewayProcess;
  let metric: (line: RegExp) => Promise<number>;
  beforeAll(async () => {
    // Its bounds fit the limit it started with (1,024); the limit is then lowered under it, as
    // descriptors taken by something else would: clients can then exhaust what is left.
    ({ router, metric } = await startRouter({}, 1024));
    const lowered = spawnSync('prlimit', ['--pid', String(router.child.pid), `--nofile=${DESCRIPTORS}:${DESCRIPTORS}`]);
    expect(lowered.status).toBe(0);
  }, 90_000);
  afterAll(() => router?.stop('SIGTERM'));

  it('a connect that fails with EMFILE is a 503 of the router: no ejection, no "gateway failed" line', async () => {
    gatewayLoad.delayMs = 2;
    const pid = router.child.pid!;
    const open = () => readdirSync(`/proc/${pid}/fd`).length;
    // One connection that asks, then idle ones until the router has no descriptor left.
    const asker = await connect(router.port);
    const fillers: net.Socket[] = [];
    while (open() < DESCRIPTORS) {
      const batch = DESCRIPTORS - open();
      for (let i = 0; i < batch; i++) fillers.push(net.connect(router.port, '127.0.0.1').on('error', () => {}));
      await waitUntil(() => open() >= DESCRIPTORS || fillers.every((s) => !s.connecting), { timeoutMs: 5000 });
      await new Promise((r) => setTimeout(r, 100));
    }
    const answers = readAnswers(asker, 10);
    for (let i = 0; i < 10; i++) asker.write(`GET ${content(i)} HTTP/1.1\r\nHost: 127.0.0.1:${router.port}\r\n\r\n`);
    const got = await answers;
    asker.destroy();
    for (const s of fillers) s.destroy();
    expect(got.map((a) => a.status)).toEqual(Array(10).fill(503));
    expect(JSON.parse(got[0]!.body)).toMatchObject({ code: 'unavailable' });
    await waitUntil(() => open() < DESCRIPTORS - 20, { timeoutMs: 5000 });
    expect(await metric(/^arkvory_router_overloaded_total\{reason="descriptors"\} (\d+)$/m)).toBe(10);
    expect(await metric(/^arkvory_router_ejections_total (\d+)$/m)).toBe(0);
    expect(await metric(/^arkvory_router_gateways\{state="reads"\} (\d+)$/m)).toBe(1);
    const lines = router.logLines();
    expect(lines.filter((l) => /gateway failed|request failed|gateway left/.test(String(l.msg)))).toEqual([]);
    // A bounded number of lines for the shortage, whatever the number of requests it failed.
    expect(problemLines(lines).map((l) => l.msg)).toEqual(
      Array(OWN_FAILURE_LOG.linesPerInterval).fill(expect.stringMatching(/^router out of descriptors or local ports/)),
    );
  }, 60_000);
});

describe('router: connections that never send a request cannot hold its connection bound', () => {
  const BOUND = 8;
  let router: GatewayProcess;
  beforeAll(async () => {
    ({ router } = await startRouter({ ARKVORY_MAX_CONNECTIONS: String(BOUND) }));
  }, 90_000);
  afterAll(async () => {
    gatewayLoad.delayMs = 2;
    await router?.stop('SIGTERM');
  });

  /** A GET on a connection of its own: its status and Connection header. */
  const get = (path: string) =>
    new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
      http
        .get(`${router.url}${path}`, { agent: false }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
        })
        .on('error', reject);
    });

  it('one client holding every connection without a request loses the oldest to the next client', async () => {
    // Accepted in the order they connected: every one of them before the client below.
    const silent = await Promise.all(Array.from({ length: BOUND }, () => connect(router.port)));
    try {
      const closed = silent.map((s) => new Promise<void>((r) => s.once('close', () => r())));
      expect(await get(content(1))).toMatchObject({ status: 200 });
      // The oldest silent connection made room; the others stay until their head timeout.
      await closed[0];
      expect(silent.filter((s) => !s.destroyed).length).toBe(BOUND - 1);
    } finally {
      for (const s of silent) s.destroy();
    }
  }, 30_000);

  it('with every connection in a request, the next still gets the fast 503 (health answered)', async () => {
    gatewayLoad.delayMs = 3000;
    gatewayLoad.inFlight = 0;
    const busy = Array.from({ length: BOUND }, (_, i) => get(content(i)));
    await waitUntil(() => gatewayLoad.inFlight === BOUND, { what: 'every connection in a request', timeoutMs: 10_000 });
    expect(await get(content(99))).toEqual({ status: 503, connection: 'close' });
    expect((await get('/health/status')).status).toBe(200);
    expect((await Promise.all(busy)).map((a) => a.status)).toEqual(Array(BOUND).fill(200));
  }, 30_000);
});
