/**
 * Router edge cases against real in-test HTTP servers standing in for gateways (static
 * ARKVORY_ROUTER_BACKENDS, writer first): headers both ways, redirects passed through, a body cut
 * upstream is cut for the client, a client that leaves aborts the upstream request, one retry
 * before the response, 502/504 codes.
 */
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net, { type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from '../../test/support/content.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';
import { answerHealthProbe } from '../../test/support/health-probe.ts';

interface Upstream {
  url: string;
  server: http.Server;
  seen: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; rawHeaders: string[] }>;
  /** Resolves when the upstream saw the request for `path` end without completing. */
  aborted: Map<string, Promise<void>>;
}

type Behaviour = (req: http.IncomingMessage, res: http.ServerResponse, up: Upstream) => void;

async function startUpstream(name: string, behave: Behaviour): Promise<Upstream> {
  const up: Upstream = { url: '', server: undefined as unknown as http.Server, seen: [], aborted: new Map() };
  up.server = http.createServer((req, res) => {
    if (answerHealthProbe(req, res)) return;
    up.seen.push({ method: req.method!, url: req.url!, headers: req.headers, rawHeaders: req.rawHeaders });
    // (Not on /dupes: a header set before writeHead makes node:http regroup a raw list by name.)
    if (req.url !== '/dupes') res.setHeader('x-upstream', name);
    behave(req, res, up);
  });
  await new Promise<void>((resolve) => up.server.listen(0, '127.0.0.1', resolve));
  up.url = `http://127.0.0.1:${(up.server.address() as AddressInfo).port}`;
  return up;
}

function watchAbort(up: Upstream, req: http.IncomingMessage, res: http.ServerResponse): void {
  up.aborted.set(
    req.url!,
    new Promise<void>((resolve) => res.on('close', () => (res.writableFinished ? undefined : resolve()))),
  );
}

const payload = Buffer.alloc(1024 * 1024, 7);
const FLOOD_BYTES = 128 * 1024 * 1024;
const flood = { written: 0, lastProgressAt: 0 };

/** Writer: echoes, redirects, cuts bodies, hangs, streams forever, drops uploads — by path. */
const writerBehaviour: Behaviour = (req, res, up) => {
  const path = req.url!.split('?')[0]!;
  if (path.endsWith('/redirect/content') || path === '/redirect') {
    res.writeHead(302, { location: 'https://elsewhere.example/file?x=1' }).end();
  } else if (path.endsWith('/cut/content')) {
    res.writeHead(200, { 'content-length': String(payload.length) });
    res.write(payload.subarray(0, 100_000), () => setTimeout(() => req.socket.destroy(), 50));
  } else if (path.endsWith('/endless/content')) {
    watchAbort(up, req, res);
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const timer = setInterval(() => res.write(Buffer.alloc(16 * 1024)), 20);
    res.on('close', () => clearInterval(timer));
  } else if (path.endsWith('/flood/content')) {
    // Writes FLOOD_BYTES as fast as the router takes them, honouring backpressure.
    const chunk = Buffer.alloc(256 * 1024, 1);
    res.writeHead(200, { 'content-length': String(FLOOD_BYTES) });
    flood.written = 0;
    flood.lastProgressAt = performance.now();
    const pump = () => {
      while (flood.written < FLOOD_BYTES) {
        flood.written += chunk.length;
        flood.lastProgressAt = performance.now();
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  } else if (path === '/dupes') {
    res
      .writeHead(200, [
        'Set-Cookie',
        'a=1',
        'X-Multi',
        'one',
        'set-cookie',
        'b=2',
        'x-multi',
        'two',
        'Content-Length',
        '2',
      ])
      .end('ok');
  } else if (path === '/early-hints') {
    // A 103 before the answer (Early Hints): undici reports it like a final head.
    res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' }, () =>
      res.writeHead(200, { 'content-length': '6' }).end('hinted'),
    );
  } else if (path === '/hang') {
    // Never answers.
  } else if (req.method === 'PUT' && path.endsWith('/drop')) {
    req.socket.destroy();
  } else if (req.method === 'PUT') {
    watchAbort(up, req, res);
    let bytes = 0;
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ bytes })));
  } else {
    res
      .writeHead(206, {
        etag: '"abc"',
        'content-range': 'bytes 0-4/10',
        'content-length': '5',
        'accept-ranges': 'bytes',
        connection: 'keep-alive, x-upstream-hop',
        'x-upstream-hop': 'secret',
      })
      .end('hello');
  }
};

let writer: Upstream;
let flaky: Upstream;
let router: GatewayProcess;

beforeAll(async () => {
  writer = await startUpstream('writer', writerBehaviour);
  // A "reader" that passes probes but resets every proxied connection before answering.
  flaky = await startUpstream('flaky', (req) => req.socket.destroy());
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: `${writer.url},${flaky.url}`,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS: '1',
    },
    timeoutMs: 90_000,
  });
}, 120_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  for (const up of [writer, flaky]) {
    up?.server.closeAllConnections();
    await new Promise((r) => up?.server.close(r));
  }
});

const contentPath = (name: string) => `/api/v1/repositories/r/artifacts/${name}/content`;

describe('router edges with stand-in gateways', () => {
  it('preserves end-to-end headers both ways, replaces planted forwarding headers and drops hop-by-hop ones', async () => {
    const res = await request(`${router.url}/api/v1/repositories/r/artifacts/a`, {
      headers: {
        authorization: 'Bearer ark_k_s',
        range: 'bytes=0-4',
        'if-range': '"abc"',
        'if-none-match': '"zzz"',
        connection: 'keep-alive, x-client-hop',
        'x-client-hop': '1',
        'x-forwarded-for': '6.6.6.6',
        forwarded: 'for=6.6.6.6',
        'x-request-id': 'trace-1',
      },
    });
    expect(res.status).toBe(206);
    expect(res.body.toString()).toBe('hello');
    expect(res.headers).toMatchObject({
      etag: '"abc"',
      'content-range': 'bytes 0-4/10',
      'content-length': '5',
      'accept-ranges': 'bytes',
      'x-upstream': 'writer',
      'x-request-id': 'trace-1',
    });
    expect(res.headers['x-upstream-hop']).toBeUndefined();
    const seen = writer.seen.at(-1)!.headers;
    expect(seen).toMatchObject({
      authorization: 'Bearer ark_k_s',
      range: 'bytes=0-4',
      'if-range': '"abc"',
      'if-none-match': '"zzz"',
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-proto': 'http',
    });
    // The router's own id goes upstream, not the client's (which is echoed back above).
    expect(seen['x-request-id']).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(seen.forwarded).toMatch(/^for=127\.0\.0\.1;proto=http;host=/);
    expect(seen['x-client-hop']).toBeUndefined();
  });

  it("a gateway's 103 Early Hints before its answer: the GET gets the final answer", async () => {
    const res = await request(`${router.url}/early-hints`, { headers: { 'x-request-id': 'hints-1' } });
    expect(res.status).toBe(200);
    expect(res.body.toString()).toBe('hinted');
    expect(res.headers['x-upstream']).toBe('writer');
  });

  it('passes repeated headers both ways in order and as spelled, nothing joined; planted X-Forwarded-For lines replaced', async () => {
    const { hostname, port } = new URL(router.url);
    const raw = await new Promise<{ status: number; rawHeaders: string[] }>((resolve, reject) => {
      const req = http.request(
        {
          hostname,
          port,
          path: '/dupes',
          agent: false,
          headers: [
            'Host',
            `${hostname}:${port}`,
            'X-Client-Multi',
            'one',
            'Cookie',
            'a=1',
            'X-Forwarded-For',
            '6.6.6.6',
            'x-client-multi',
            'two',
            'cookie',
            'b=2',
            'X-Forwarded-For',
            '7.7.7.7',
          ],
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, rawHeaders: res.rawHeaders }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    const lines = (list: string[], name: RegExp) =>
      list.flatMap((n, i) => (i % 2 === 0 && name.test(n) ? [`${n}: ${list[i + 1]}`] : []));
    expect(raw.status).toBe(200);
    expect(lines(raw.rawHeaders, /^(set-cookie|x-multi)$/i)).toEqual([
      'Set-Cookie: a=1',
      'X-Multi: one',
      'set-cookie: b=2',
      'x-multi: two',
    ]);
    const seen = writer.seen.at(-1)!;
    expect(seen.url).toBe('/dupes');
    expect(lines(seen.rawHeaders, /^(x-client-multi|cookie|x-forwarded-for)$/i)).toEqual([
      'X-Client-Multi: one',
      'Cookie: a=1',
      'x-client-multi: two',
      'cookie: b=2',
      'x-forwarded-for: 127.0.0.1',
    ]);
  });

  it('carries the GETs undici refuses over node:http: with Expect and no body, with an absolute-form target; and HEAD', async () => {
    // `Expect: 100-continue` without a body: the gateway is asked again and answers at once.
    const expecting = await request(`${router.url}${contentPath('expect')}`, {
      headers: { expect: '100-continue', 'x-request-id': 'expect-1' },
    });
    expect(expecting.status).toBe(206);
    expect(expecting.body.toString()).toBe('hello');
    const sawExpect = writer.seen.find((s) => s.url === contentPath('expect'));
    expect(sawExpect?.headers.expect).toBe('100-continue');
    // An absolute-form target reaches the gateway as written.
    const { hostname, port } = new URL(router.url);
    const absolute = `http://${hostname}:${port}${contentPath('absolute')}`;
    const status = await new Promise<number>((resolve, reject) => {
      http
        .request({ hostname, port, path: absolute, agent: false, headers: { 'x-request-id': 'absolute-1' } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        })
        .on('error', reject)
        .end();
    });
    expect(status).toBe(206);
    expect(writer.seen.some((s) => s.url === absolute)).toBe(true);
    const head = await request(`${router.url}${contentPath('head')}`, { method: 'HEAD' });
    expect(head.status).toBe(206);
    expect(head.headers.etag).toBe('"abc"');
    expect(head.body.length).toBe(0);
  });

  it('passes a redirect through without following it', async () => {
    const res = await request(`${router.url}/redirect`);
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe('https://elsewhere.example/file?x=1');
  });

  it('retries a GET that fails before the response once on another gateway; reads all succeed', async () => {
    const before = flaky.seen.length;
    for (let i = 0; i < 4; i++) {
      const res = await request(`${router.url}${contentPath('a')}`);
      expect(res.status).toBe(206);
      expect(res.headers['x-upstream']).toBe('writer');
    }
    // The flaky gateway was tried (and then left the pool until its next passing probe).
    expect(flaky.seen.length - before).toBeGreaterThanOrEqual(1);
  });

  it('answers 502 gateway_unreachable to a write whose connection is reset, without a retry', async () => {
    const before = writer.seen.filter((s) => s.method === 'PUT').length;
    const res = await request(`${router.url}/api/v1/repositories/r/artifacts/drop`, {
      method: 'PUT',
      body: Buffer.from('data'),
    });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body.toString()).code).toBe('gateway_unreachable');
    expect(writer.seen.filter((s) => s.method === 'PUT').length - before).toBe(1);
  });

  it('answers 504 gateway_timeout when the gateway stays silent past the idle timeout', async () => {
    const started = performance.now();
    const res = await request(`${router.url}/hang`);
    expect(res.status).toBe(504);
    expect(JSON.parse(res.body.toString()).code).toBe('gateway_timeout');
    expect(performance.now() - started).toBeGreaterThan(900);
  });

  it('destroys the client response when the upstream body is cut (never a short body that looks complete)', async () => {
    const outcome = await new Promise<{ complete: boolean; bytes: number }>((resolve) => {
      http.get(`${router.url}${contentPath('cut')}`, { agent: false }, (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('error', () => {});
        res.on('close', () => resolve({ complete: res.complete, bytes }));
      });
    });
    expect(outcome.complete).toBe(false);
    expect(outcome.bytes).toBeLessThan(payload.length);
  });

  it('streams with backpressure: a client that stops reading stalls the gateway instead of filling the router', async () => {
    let res!: http.IncomingMessage;
    let received = 0;
    await new Promise<void>((resolve, reject) => {
      http
        .get(`${router.url}${contentPath('flood')}`, { agent: false }, (r) => {
          res = r;
          r.once('data', (c: Buffer) => {
            received += c.length;
            r.pause();
            resolve();
          });
        })
        .on('error', reject);
    });
    // Wait until the gateway's writes have made no progress for 700 ms, or it finished.
    const deadline = performance.now() + 30_000;
    while (
      performance.now() - flood.lastProgressAt < 700 &&
      flood.written < FLOOD_BYTES &&
      performance.now() < deadline
    )
      await new Promise((r) => setTimeout(r, 50));
    const writtenWhilePaused = flood.written;
    // Only socket buffers sit between a paused client and the gateway: far less than the body.
    expect(writtenWhilePaused).toBeLessThan(FLOOD_BYTES / 2);
    res.on('data', (c: Buffer) => (received += c.length));
    const ended = new Promise<void>((resolve) => res.on('end', () => resolve()));
    res.resume();
    await ended;
    expect(received).toBe(FLOOD_BYTES);
    expect(flood.written).toBe(FLOOD_BYTES);
  }, 60_000);

  it('aborts the upstream download when the client goes away', async () => {
    await new Promise<void>((resolve) => {
      const req = http.get(`${router.url}${contentPath('endless')}`, { agent: false }, (res) => {
        res.once('data', () => {
          req.destroy();
          resolve();
        });
      });
      // The test ends the request itself; what its socket then reports is not the test's subject.
      req.on('error', () => {});
    });
    await expect(writer.aborted.get(contentPath('endless'))).resolves.toBeUndefined();
  });

  it('logs a request whose client left before the gateway answered as 499, not completed', async () => {
    const seen = writer.seen.length;
    const req = http.get(`${router.url}/hang`, { agent: false, headers: { 'x-request-id': 'left-early' } });
    req.on('error', () => {});
    let head = false;
    req.on('response', () => (head = true));
    // Gone once the gateway holds the request, before its silence reaches the idle timeout (1 s).
    await waitUntil(() => writer.seen.slice(seen).some((s) => s.url === '/hang'), { intervalMs: 5 });
    req.destroy();
    let line: Record<string, unknown> | undefined;
    await waitUntil(
      () => (line = router.logLines().find((l) => l.msg === 'request' && l.clientReqId === 'left-early')) !== undefined,
      { what: 'the request line' },
    );
    expect(head).toBe(false);
    expect(line).toMatchObject({ status: 499, completed: false });
  });

  it('aborts the upstream upload when the client goes away mid-body', async () => {
    const path = '/api/v1/repositories/r/artifacts/slow';
    const req = http.request(`${router.url}${path}`, {
      method: 'PUT',
      agent: false,
      headers: { 'content-length': String(10 * 1024 * 1024) },
    });
    req.on('error', () => {});
    req.write(Buffer.alloc(64 * 1024));
    await new Promise<void>((resolve, reject) => {
      const deadline = setTimeout(() => reject(new Error('upload never reached the upstream')), 5000);
      const poll = setInterval(() => {
        if (writer.aborted.has(path)) {
          clearInterval(poll);
          clearTimeout(deadline);
          resolve();
        }
      }, 10);
    });
    req.destroy();
    await expect(writer.aborted.get(path)).resolves.toBeUndefined();
  });

  it('a client that stalls its upload body past the idle timeout is not cut as a silent gateway: the upload completes once it resumes', async () => {
    const path = '/api/v1/repositories/r/artifacts/stalled-body';
    const { port } = new URL(router.url);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => {
        socket.write(
          `PUT ${path} HTTP/1.1\r\nhost: x\r\ncontent-length: 20\r\nx-request-id: stalled-body\r\n\r\n0123456789`,
        );
      });
      let text = '';
      socket.setEncoding('latin1');
      socket.on('data', (d: string) => {
        text += d;
        if (text.includes('"bytes"')) socket.end();
      });
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
      // The gateway holds the request, the client is silent: three idle timeouts (1 s) pass.
      void waitUntil(() => writer.aborted.has(path), { intervalMs: 5 }).then(() =>
        setTimeout(() => socket.write('abcdefghij'), 3000),
      );
    });
    expect(answer).toMatch(/^HTTP\/1\.1 201 /);
    expect(answer).toContain('{"bytes":20}');
    await waitUntil(() => router.logLines().some((l) => l.msg === 'request' && l.clientReqId === 'stalled-body'), {
      what: 'the request line',
    });
    expect(router.logLines().filter((l) => l.clientReqId === 'stalled-body' && l.msg !== 'request')).toEqual([]);
  });

  it.each([
    ['through undici', 'slow-reader-undici', {}],
    ['over node:http (a GET with Expect)', 'slow-reader-node', { expect: '100-continue' }],
  ])(
    'a client that stops reading past the idle timeout is not cut as a silent gateway: it gets the whole body once it reads again (%s)',
    async (_, id, extra) => {
      let received = 0;
      const outcome = await new Promise<{ complete: boolean }>((resolve, reject) => {
        http
          .get(
            `${router.url}${contentPath('flood')}`,
            { agent: false, headers: { 'x-request-id': id, ...extra } },
            (res) => {
              res.once('data', (c: Buffer) => {
                received += c.length;
                res.pause();
                // Paused until the gateway has been held silent (by the full buffers) for three idle timeouts.
                const check = setInterval(() => {
                  if (performance.now() - flood.lastProgressAt < 3000) return;
                  clearInterval(check);
                  res.on('data', (d: Buffer) => (received += d.length));
                  res.resume();
                }, 50);
              });
              res.on('error', () => {});
              res.on('close', () => resolve({ complete: res.complete }));
            },
          )
          .on('error', reject);
      });
      expect(outcome.complete).toBe(true);
      expect(received).toBe(FLOOD_BYTES);
      await waitUntil(() => router.logLines().some((l) => l.msg === 'request' && l.clientReqId === id), {
        what: 'the request line',
      });
      expect(router.logLines().filter((l) => l.clientReqId === id && l.msg !== 'request')).toEqual([]);
    },
    60_000,
  );

  it('reports its pool on /health/status without addresses', async () => {
    const res = await request(`${router.url}/health/status`);
    expect(res.status).toBe(200);
    const body = JSON.parse(res.body.toString());
    expect(body).toMatchObject({ status: 'serving', role: 'router', writer: true, backends: { total: 2 } });
    expect(res.body.toString()).not.toContain('127.0.0.1');
  });
});

describe('router over HTTP/2 with a gateway head node:http2 cannot carry', () => {
  let bad: http.Server;
  let tlsRouter: GatewayProcess;
  let ca: CertificateAuthority;
  /** The Host lines each request for `/echo-host` reached the gateway with. */
  const hostsSeen: string[][] = [];

  beforeAll(async () => {
    // Heads an HTTP/1.1 gateway (or a proxy in front of one) may send; raw lists, so nothing regroups them.
    bad = http.createServer((req, res) => {
      if (answerHealthProbe(req, res)) return;
      req.resume();
      const path = req.url ?? '';
      if (path.endsWith('/echo-host')) {
        hostsSeen.push(req.rawHeaders.filter((_, i) => i % 2 === 1 && req.rawHeaders[i - 1]!.toLowerCase() === 'host'));
        res.writeHead(200, ['Content-Length', '2']).end('ok');
      } else if (path.endsWith('/two-types'))
        res
          .writeHead(200, ['Content-Type', 'text/plain', 'Content-Type', 'text/html', 'Content-Length', '2'])
          .end('ok');
      else if (path.endsWith('/status-600')) res.writeHead(600, ['Content-Length', '2']).end('ok');
      else res.writeHead(200, ['HTTP2-Settings', 'AAMAAABkAAQAAP__', 'Content-Length', '2']).end('ok');
    });
    await new Promise<void>((resolve) => bad.listen(0, '127.0.0.1', resolve));
    const dir = await makeTempDir('arkvory-router-h2-');
    ca = await createCertificateAuthority(dir);
    const cert = await issueServerCertificate(ca, dir);
    tlsRouter = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: `http://127.0.0.1:${(bad.address() as AddressInfo).port}`,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
        ARKVORY_TLS_CERT_FILE: cert.certFile,
        ARKVORY_TLS_KEY_FILE: cert.keyFile,
      },
      waitFor: 'none',
    });
    const live = () =>
      new Promise<boolean>((resolve) => {
        const req = https.get(`https://127.0.0.1:${tlsRouter.port}/health/live`, { ca: ca.certPem }, (res) => {
          res.resume();
          resolve(res.statusCode === 200);
        });
        req.on('error', () => resolve(false));
      });
    await waitUntil(live, {
      what: 'the router to serve https',
      timeoutMs: 60_000,
      intervalMs: 100,
      process: tlsRouter,
    });
  }, 120_000);

  afterAll(async () => {
    await tlsRouter?.stop('SIGTERM');
    bad?.closeAllConnections();
    await new Promise((r) => bad?.close(r));
  });

  it('answers 502 (GET through undici, HEAD and DELETE through node:http) and stays up; HTTP2-Settings is dropped', async () => {
    const session = http2.connect(`https://127.0.0.1:${tlsRouter.port}`, { ca: ca.certPem });
    session.on('error', () => {});
    const status = (method: string, path: string) =>
      new Promise<number>((resolve, reject) => {
        const stream = session.request({ ':method': method, ':path': path });
        stream.on('response', (h) => resolve(Number(h[':status'])));
        stream.on('error', reject);
        stream.resume();
        stream.end();
      });
    for (const method of ['GET', 'HEAD', 'DELETE'])
      for (const name of ['two-types', 'status-600'])
        expect(await status(method, `/api/v1/repositories/r/artifacts/${name}`), `${method} ${name}`).toBe(502);
    expect(await status('GET', '/api/v1/repositories/r/artifacts/h2-settings')).toBe(200);
    expect(await status('GET', '/health/live')).toBe(200);
    expect(tlsRouter.child.exitCode).toBeNull();
    session.close();
  });

  it('forwards :authority as the Host (RFC 9113 §8.3.1) and refuses a Host that differs from it with 400', async () => {
    const session = http2.connect(`https://127.0.0.1:${tlsRouter.port}`, { ca: ca.certPem });
    session.on('error', () => {});
    const send = (headers: http2.OutgoingHttpHeaders) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({
          ':method': 'GET',
          ':path': '/api/v1/repositories/r/artifacts/echo-host',
          ...headers,
        });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on('response', (h) => (status = Number(h[':status'])));
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => resolve({ status, body: Buffer.concat(chunks).toString() }));
        stream.on('error', reject);
        stream.end();
      });
    hostsSeen.length = 0;
    // Both sent, naming one authority (host names compare case-insensitively): :authority's goes on, once.
    expect((await send({ ':authority': 'a.example:8443', host: 'A.Example:8443' })).status).toBe(200);
    // :authority alone: it becomes the Host an HTTP/1.1 gateway needs.
    expect((await send({ ':authority': 'b.example' })).status).toBe(200);
    expect(hostsSeen).toEqual([['a.example:8443'], ['b.example']]);
    // A Host naming another authority: refused here, never forwarded.
    const mismatch = await send({ ':authority': 'a.example', host: 'evil.example' });
    expect(mismatch.status).toBe(400);
    expect(JSON.parse(mismatch.body)).toMatchObject({ code: 'malformed_request' });
    expect(JSON.parse(mismatch.body).message).toContain(':authority');
    expect(hostsSeen).toHaveLength(2);
    await waitUntil(
      () => tlsRouter.logLines().some((l) => l.kind === 'authority_mismatch' && l.code === 'malformed_request'),
      { what: 'the authority_mismatch fault line', timeoutMs: 5000, intervalMs: 50 },
    );
    session.close();
  });
});

describe('router with a gateway that stalls the body of the 5xx it retries past', () => {
  let stalling: Upstream;
  let good: Upstream;
  let retryRouter: GatewayProcess;
  /** Connections of `stalling` that carried a read (the probe's keep-alive connection is not one). */
  const readSockets = new Set<Socket>();

  beforeAll(async () => {
    // A 503 head announcing 100 bytes, 10 of them, then silence: the router retries elsewhere and drops this body.
    stalling = await startUpstream('stalling', (req, res) => {
      readSockets.add(req.socket);
      req.socket.once('close', () => readSockets.delete(req.socket));
      res.writeHead(503, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('0123456789');
    });
    good = await startUpstream('good', (_req, res) => res.writeHead(200, { 'content-length': '4' }).end('good'));
    retryRouter = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: `${stalling.url},${good.url}`,
        ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
        ARKVORY_ROUTER_IDLE_TIMEOUT_SECONDS: '1',
        // Reads keep visiting the stalling gateway.
        ARKVORY_ROUTER_OUTLIER_CONSECUTIVE_5XX: '0',
      },
      timeoutMs: 90_000,
    });
  }, 120_000);

  afterAll(async () => {
    await retryRouter?.stop('SIGTERM');
    for (const up of [stalling, good]) {
      up?.server.closeAllConnections();
      await new Promise((r) => up?.server.close(r));
    }
  });

  it('the dropped body stays under the idle timeout: its connection is cut once silent, none stays open', async () => {
    // Over undici, and over node:http (a GET asking for `100 Continue` goes there).
    for (const headers of [{}, { expect: '100-continue' }] as Record<string, string>[])
      for (let i = 0; i < 6; i++) {
        const res = await request(`${retryRouter.url}${contentPath('stall')}`, { headers });
        expect(res.status).toBe(200);
        expect(res.body.toString()).toBe('good');
      }
    expect(stalling.seen.filter((s) => s.headers.expect === undefined).length).toBeGreaterThanOrEqual(1);
    expect(stalling.seen.filter((s) => s.headers.expect === '100-continue').length).toBeGreaterThanOrEqual(1);
    // Idle timeout 1 s, swept every 250 ms: cut within 1.5 s of the last byte.
    await waitUntil(() => readSockets.size === 0, {
      what: "the router to close its connections to the stalling gateway's dropped bodies",
      timeoutMs: 4000,
      intervalMs: 50,
    });
  });
});
