/**
 * Request smuggling and connection desync through a real router in front of a real gateway (its
 * PostgreSQL and Redis), with raw sockets as the hostile client, over TLS so that one router takes
 * both HTTP/1.1 and HTTP/2. The invariant: the gateway sees only requests the client sent as whole
 * requests of their own, each forwarded once by the router (its `clientReqId` is a router request's
 * id), and each client request gets its own answer and no bytes of another's.
 */
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { createCertificateAuthority, issueServerCertificate, waitUntil } from '../../test/harness/index.ts';

const db = useTestDatabase();
const redis = useTestRedis();
let gateway: GatewayProcess;
let router: GatewayProcess;
let ca: string;
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'r');
  key = (await createServiceAccount(db.pool, { grants: { r: 'write' } })).key;
  const dir = await makeTempDir('arkvory-router-smuggling-');
  const authority = await createCertificateAuthority(dir);
  const certificate = await issueServerCertificate(authority, dir);
  ca = authority.certPem;
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_REDIS_URL: redis.url,
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      // Every request line, the client faults' past their budget too (those go to debug).
      ARKVORY_LOG_LEVEL: 'debug',
    },
  });
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: gateway.url,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_TLS_CERT_FILE: certificate.certFile,
      ARKVORY_TLS_KEY_FILE: certificate.keyFile,
    },
    // The harness waits over plain HTTP: ready once a proxied request is answered over TLS.
    waitFor: 'none',
    timeoutMs: 60_000,
  });
  await waitUntil(async () => (await http1(`GET /api/v1/ready HTTP/1.1\r\nHost: x\r\n\r\n`, 1)).includes(' 404 '), {
    what: 'the TLS router to forward',
    timeoutMs: 30_000,
    process: router,
    retryOnError: true,
  });
}, 90_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  await gateway?.stop('SIGTERM');
});

function connect(alpn: string): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect(
      { host: '127.0.0.1', port: router.port, ca, servername: 'localhost', ALPNProtocols: [alpn] },
      () => resolve(socket),
    );
    socket.once('error', reject);
  });
}

/**
 * Sends `bytes` on a new HTTP/1.1 connection; resolves with everything received, once the router
 * closed it (`close`) or once `until` answers are in (as `readAnswers` counts them).
 */
async function http1(bytes: string, until: 'close' | number): Promise<string> {
  const socket = await connect('http/1.1');
  return new Promise((resolve) => {
    let text = '';
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (typeof until === 'number' && readAnswers(text).length >= until) {
        socket.destroy();
        resolve(text);
      }
    });
    // A router that refused the request may reset the connection under bytes it did not read.
    socket.on('error', () => resolve(text));
    socket.on('close', () => resolve(text));
    socket.write(Buffer.from(bytes, 'latin1'));
  });
}

/**
 * The answers in `text` as a client reads them, one after the other: a head up to the blank line,
 * then a body of its Content-Length. An HTTP/1.0 client has no 1xx: whatever head comes first is
 * its request's answer.
 */
function readAnswers(text: string): Array<{ status: number; body: string }> {
  const answers: Array<{ status: number; body: string }> = [];
  let rest = text;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end === -1) return answers;
    const head = rest.slice(0, end);
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (rest.length < end + 4 + length) return answers;
    answers.push({ status: Number(head.slice(9, 12)), body: rest.slice(end + 4, end + 4 + length) });
    rest = rest.slice(end + 4 + length);
  }
}

/** Gateway request lines from `from` on, once `count` are in: each must be one the router forwarded. */
async function gatewaySaw(from: number, count: number): Promise<Array<Record<string, unknown>>> {
  const lines = () =>
    gateway
      .logLines()
      .slice(from)
      .filter((l) => l.msg === 'request');
  await waitUntil(() => lines().length >= count, { what: `${count} gateway request lines`, timeoutMs: 10_000 });
  return lines();
}

/**
 * Every request the gateway answered (its probes by the router aside) carries the id of a request
 * the router forwarded, each once. The router's line is written once its client's answer closed,
 * which may be after the gateway's.
 */
async function expectEachForwardedOnce(): Promise<void> {
  const seen = () =>
    gateway
      .logLines()
      .filter((l) => l.msg === 'request' && !String(l.route).startsWith('/health/'))
      .map((l) => l.clientReqId);
  const unknown = () => {
    const forwarded = new Set(
      router
        .logLines()
        .filter((l) => l.msg === 'request')
        .map((l) => l.reqId),
    );
    return seen().filter((id) => !forwarded.has(id));
  };
  await waitUntil(() => unknown().length === 0, { what: 'the router lines', timeoutMs: 2000 }).catch(() => {});
  expect(unknown()).toEqual([]);
  expect(new Set(seen()).size).toBe(seen().length);
}

const host = () => `Host: 127.0.0.1:${router.port}\r\n`;
/** What a smuggler hides in a body: a request of its own, which must never reach the gateway as one. */
const SMUGGLED = `GET /api/v1/smuggled HTTP/1.1\r\nHost: x\r\n\r\n`;

describe('router: HTTP/1.1 framing a gateway could read otherwise', () => {
  it('ambiguous or malformed framing is answered 400 and the connection closed; nothing is forwarded', async () => {
    const post = `POST /api/v1/repositories HTTP/1.1\r\n${host()}`;
    const refused: Record<string, string> = {
      'Content-Length with Transfer-Encoding': `${post}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      'Transfer-Encoding with Content-Length': `${post}Transfer-Encoding: chunked\r\nContent-Length: 90\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      'two equal Content-Length': `${post}Content-Length: 2\r\nContent-Length: 2\r\n\r\nab${SMUGGLED}`,
      'two different Content-Length': `${post}Content-Length: 2\r\nContent-Length: 44\r\n\r\nab${SMUGGLED}`,
      'Content-Length as a list': `${post}Content-Length: 2, 2\r\n\r\nab${SMUGGLED}`,
      'chunked, identity': `${post}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      xchunked: `${post}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      'Transfer-Encoding folded': `${post}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      'Transfer-Encoding twice': `${post}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`,
      'chunk size overflowing 64 bits': `${post}Transfer-Encoding: chunked\r\n\r\n10000000000000002\r\nab\r\n0\r\n\r\n${SMUGGLED}`,
      'chunks ended by bare LF': `${post}Transfer-Encoding: chunked\r\n\r\n2\nab\n0\n\n${SMUGGLED}`,
      'a tab in the request line': `GET\t/api/v1/repositories HTTP/1.1\r\n${host()}\r\n`,
      'a space in the target': `GET /api/v1/repo ${SMUGGLED}`,
      'a request line of 100 kB': `GET /api/v1/${'a'.repeat(100_000)} HTTP/1.1\r\n${host()}\r\n`,
    };
    const from = gateway.logLines().length;
    for (const [name, bytes] of Object.entries(refused)) {
      const answers = readAnswers(await http1(bytes, 'close'));
      expect(
        answers.map((a) => a.status),
        name,
      ).toEqual([400]);
    }
    // The marker is the only request the gateway saw since.
    await http1(`GET /api/v1/marker HTTP/1.1\r\n${host()}\r\n`, 1);
    const saw = await gatewaySaw(from, 1);
    expect(saw.map((l) => l.status)).toEqual([404]);
    await expectEachForwardedOnce();
  });

  it('framing Node reads as chunked is forwarded as one request; what follows its body is the next', async () => {
    const post = `POST /api/v1/repositories HTTP/1.1\r\n${host()}`;
    const accepted: Record<string, string> = {
      'upper-case CHUNKED': `${post}Transfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n`,
      'a tab before the value': `${post}Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n`,
      'identity, chunked': `${post}Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n`,
      'a chunk extension': `${post}Transfer-Encoding: chunked\r\n\r\n2;a=b\r\nab\r\n0\r\n\r\n`,
      'leading zeros': `${post}Transfer-Encoding: chunked\r\n\r\n0002\r\nab\r\n0\r\n\r\n`,
      'a GET with a body': `GET /api/v1/repositories HTTP/1.1\r\n${host()}Content-Length: ${SMUGGLED.length}\r\n\r\n${SMUGGLED}`,
      'a DELETE with a chunked body': `DELETE /api/v1/repositories HTTP/1.1\r\n${host()}Transfer-Encoding: chunked\r\n\r\n${SMUGGLED.length.toString(16)}\r\n${SMUGGLED}\r\n0\r\n\r\n`,
    };
    for (const [name, bytes] of Object.entries(accepted)) {
      const from = gateway.logLines().length;
      const next = `GET /api/v1/next HTTP/1.1\r\n${host()}\r\n`;
      const answers = readAnswers(await http1(bytes + next, 2));
      expect(answers.length, name).toBe(2);
      expect(answers[1]!.body, name).toContain('not_found');
      const saw = await gatewaySaw(from, 2);
      expect(
        saw.map((l) => l.route),
        name,
      ).toEqual(['/api/v1/repositories', 'unmatched']);
    }
    await expectEachForwardedOnce();
  });

  it("an HTTP/1.0 client's Expect: 100-continue gets no 100: each of its requests reads its own answer", async () => {
    const from = gateway.logLines().length;
    const keepAlive = `${host()}Connection: keep-alive\r\n`;
    const text = await http1(
      `PUT /api/v1/repositories/r/artifacts/http10 HTTP/1.0\r\n${keepAlive}Authorization: Bearer ${key}\r\n` +
        `Content-Type: application/octet-stream\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab` +
        `GET /api/v1/next HTTP/1.0\r\n${keepAlive}\r\n`,
      2,
    );
    // A 1xx is no answer to an HTTP/1.0 client (RFC 9110 §15.2): read as one, it would be the PUT's,
    // and the PUT's 201 the GET's.
    expect(text).not.toMatch(/^HTTP\/1\.1 100/m);
    expect(readAnswers(text).map((a) => a.status)).toEqual([201, 404]);
    expect((await gatewaySaw(from, 2)).map((l) => l.status)).toEqual([201, 404]);
    await expectEachForwardedOnce();
  });
});
