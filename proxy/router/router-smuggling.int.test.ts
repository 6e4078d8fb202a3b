/**
 * Request smuggling and connection desync through a real router in front of a real gateway (its
 * PostgreSQL and Redis), with raw sockets as the hostile client, over TLS so that one router takes
 * both HTTP/1.1 and HTTP/2. The invariant: the gateway sees only requests the client sent as whole
 * requests of their own, each forwarded once by the router (its `clientReqId` is a router request's
 * id), and each client request gets its own answer and no bytes of another's.
 */
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { startTlsRouter } from '../../test/support/tls-router.ts';

const db = useTestDatabase();
const redis = useTestRedis();
let gateway: GatewayProcess;
let router: GatewayProcess;
let ca: string;
let key: string;

beforeAll(async () => {
  await createRepository(db.pool, 'r');
  key = (await createServiceAccount(db.pool, { grants: { r: 'write' } })).key;
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_REDIS_URL: redis.url,
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      // Every request line, the client faults' past their budget too (those go to debug).
      ARKVORY_LOG_LEVEL: 'debug',
    },
  });
  await startTlsRouter(gateway, {
    // The file's helpers speak to the module's router: set before the first try.
    forwards: async (started, authority) => {
      router = started;
      ca = authority;
      return (await http1(`GET /api/v1/ready HTTP/1.1\r\nHost: x\r\n\r\n`, 1)).includes(' 404 ');
    },
  });
  // The readiness request's own line is in before any test counts the gateway's lines from here
  // (it crosses the gateway's stdout pipe after its answer).
  await waitUntil(() => gateway.logLines().some((l) => l.msg === 'request' && l.status === 404), {
    what: "the readiness request's gateway line",
    timeoutMs: 10_000,
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
 * Every request the gateway answered (its probes by the router and the requests sent to it directly,
 * with ids `direct-…`, aside) carries the id of a request
 * the router forwarded, each once. The router's line is written once its client's answer closed,
 * which may be after the gateway's.
 */
async function expectEachForwardedOnce(): Promise<void> {
  const seen = () =>
    gateway
      .logLines()
      .filter((l) => l.msg === 'request' && !String(l.route).startsWith('/health/'))
      .filter((l) => !String(l.clientReqId).startsWith('direct-'))
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

describe('router: Expect: 100-continue', () => {
  it('an Expect that lists 100-continue with another value gets its 100 Continue from the gateway', async () => {
    const from = gateway.logLines().length;
    const socket = await connect('http/1.1');
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.write(
      `PUT /api/v1/repositories/r/artifacts/listed HTTP/1.1\r\n${host()}Authorization: Bearer ${key}\r\n` +
        `Content-Type: application/octet-stream\r\nExpect: 100-continue, x-other\r\nContent-Length: 2\r\n\r\n`,
    );
    // node:http hands this request over waiting for a 100 (a client waits for it before its body).
    await waitUntil(() => text.startsWith('HTTP/1.1 100 Continue\r\n\r\n'), { what: 'the 100 Continue' });
    socket.write('ab');
    await waitUntil(() => readAnswers(text).length === 2, { what: 'the answer' });
    socket.destroy();
    expect(readAnswers(text).map((a) => a.status)).toEqual([100, 201]);
    // The gateway logs the PUT once its answer is out, which may be after the client read it: waited
    // for here, the line falls to this test rather than into the next one's.
    expect((await gatewaySaw(from, 1)).map((l) => [l.route, l.status])).toEqual([
      ['/api/v1/repositories/:repo/artifacts/:id', 201],
    ]);
  });
});

describe('an answer that closes the connection', () => {
  /** Sends `bytes` on a plain connection straight to the gateway; resolves with all it got, once it closed. */
  function toGateway(bytes: string): Promise<string> {
    return new Promise((resolve) => {
      const socket = net.connect(gateway.port, '127.0.0.1', () => socket.write(Buffer.from(bytes, 'latin1')));
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('error', () => resolve(text));
      socket.on('close', () => resolve(text));
    });
  }

  it('ends what the connection serves: requests pipelined behind it are never processed (RFC 9112 §6.1, §9.6)', async () => {
    const from = gateway.logLines().length;
    const behind = (id: string, version = '1.1') =>
      `GET /api/v1/behind HTTP/${version}\r\n${host()}Connection: keep-alive\r\nX-Request-Id: ${id}\r\n\r\n`;
    // An HTTP/1.0 request framed with Transfer-Encoding, which no 1.0 proxy in front reads as the
    // router does: processed, then the connection closes.
    const http10 = (id: string) =>
      `POST /api/v1/repositories HTTP/1.0\r\n${host()}Connection: keep-alive\r\nX-Request-Id: ${id}\r\nTransfer-Encoding: chunked\r\n\r\n`;
    const viaRouter = await http1(`${http10('router')}2\r\nab\r\n0\r\n\r\n${behind('behind-router', '1.0')}`, 'close');
    expect(readAnswers(viaRouter).map((a) => a.status)).toEqual([405]);
    expect(viaRouter).toMatch(/\r\nconnection: close\r\n/i);
    // The same straight to a gateway, and an expectation the gateway answered without 100 Continue
    // (node:http closes the connection after it).
    const direct = await toGateway(`${http10('direct-1')}0\r\n\r\n${behind('behind-gateway-1', '1.0')}`);
    expect(readAnswers(direct).map((a) => a.status)).toEqual([405]);
    const expectation = await toGateway(
      `GET /api/v1/first HTTP/1.1\r\nHost: x\r\nX-Request-Id: direct-2\r\nExpect: 100-continue\r\n\r\n${behind('behind-gateway-2')}`,
    );
    expect(readAnswers(expectation).map((a) => a.status)).toEqual([404]);
    // A request after them all, through the router: what the gateway processed is in by then.
    await http1(`GET /api/v1/marker HTTP/1.1\r\n${host()}X-Request-Id: marker\r\n\r\n`, 1);
    await waitUntil(() => router.logLines().some((l) => l.clientReqId === 'marker'), { what: 'the marker' });
    const saw = await gatewaySaw(from, 4);
    expect(saw.map((l) => l.route)).toEqual(['/api/v1/repositories', '/api/v1/repositories', 'unmatched', 'unmatched']);
    expect(saw.filter((l) => String(l.clientReqId).startsWith('behind'))).toEqual([]);
    expect(router.logLines().filter((l) => l.clientReqId === 'behind-router')).toEqual([]);
    await expectEachForwardedOnce();
  });
});

describe('router: a body the gateway refuses before reading it', () => {
  /** `count` GETs, each on a new connection: each must get its own 404 (its path in no other answer). */
  async function victims(count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const answers = readAnswers(await http1(`GET /api/v1/victim-${i} HTTP/1.1\r\n${host()}\r\n`, 1));
      expect(answers.map((a) => a.status)).toEqual([404]);
    }
  }

  it.each([
    ['sent at once', ''],
    ['held back for 100 Continue', 'Expect: 100-continue\r\n'],
  ])(
    'an upload refused 401 (body %s): the rest of its body never reaches the gateway as requests',
    async (_, expect100) => {
      const from = gateway.logLines().length;
      const body = SMUGGLED.repeat(1000);
      const socket = await connect('http/1.1');
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('error', () => {});
      const closed = new Promise((resolve) => socket.on('close', resolve));
      socket.write(
        `PUT /api/v1/repositories/r/artifacts/refused HTTP/1.1\r\n${host()}Content-Type: application/octet-stream\r\n` +
          `${expect100}Content-Length: ${body.length * 2}\r\n\r\n${expect100 ? '' : body}`,
      );
      await waitUntil(() => readAnswers(text).length > 0, { what: 'the 401' });
      // The client goes on as if nothing was refused: the rest of its body, then a request of its own.
      socket.write(`${body}${body}GET /api/v1/after HTTP/1.1\r\n${host()}\r\n\r\n`);
      await victims(5);
      socket.end();
      await closed;
      expect(readAnswers(text).map((a) => a.status)).toEqual([401]);
      const saw = await gatewaySaw(from, 6);
      expect(saw.map((l) => l.status)).toEqual([401, 404, 404, 404, 404, 404]);
      await expectEachForwardedOnce();
    },
  );
});

/** An HPACK integer with an `prefix`-bit prefix (RFC 7541 §5.1). */
function hpackInteger(n: number, prefix: number): number[] {
  const max = (1 << prefix) - 1;
  if (n < max) return [n];
  const out = [max];
  for (n -= max; n >= 128; n >>= 7) out.push((n & 127) | 128);
  out.push(n);
  return out;
}

/** A header block of literal fields never indexed, names and values as given (no client-side checks). */
function headerBlock(headers: ReadonlyArray<readonly [string, string]>): Buffer {
  const bytes: number[] = [];
  for (const [name, value] of headers) {
    bytes.push(0x10);
    for (const part of [Buffer.from(name, 'latin1'), Buffer.from(value, 'latin1')])
      bytes.push(...hpackInteger(part.length, 7), ...part);
  }
  return Buffer.from(bytes);
}

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/**
 * One HTTP/2 stream sent as raw frames (node:http2's client refuses to send what is tested here):
 * HEADERS, then `data` as DATA frames, the last one ending the stream. Resolves with how the router
 * ended it: `answered` (a response head), `reset <code>` or `goaway <code>`.
 */
async function rawStream(headers: ReadonlyArray<readonly [string, string]>, data: readonly string[]): Promise<string> {
  const socket = await connect('h2');
  return new Promise((resolve, reject) => {
    const frames = [
      Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
      frame(4, 0, 0, Buffer.alloc(0)),
      frame(1, 4 | (data.length === 0 ? 1 : 0), 1, headerBlock(headers)),
      ...data.map((d, i) => frame(0, i === data.length - 1 ? 1 : 0, 1, Buffer.from(d, 'latin1'))),
    ];
    let buffered = Buffer.alloc(0);
    const end = (outcome: string) => {
      socket.destroy();
      resolve(outcome);
    };
    socket.on('error', reject);
    socket.on('close', () => resolve('closed'));
    socket.on('data', (d: Buffer) => {
      buffered = Buffer.concat([buffered, d]);
      while (buffered.length >= 9) {
        const length = buffered.readUIntBE(0, 3);
        if (buffered.length < 9 + length) return;
        const [type, flags] = [buffered[3]!, buffered[4]!];
        const payload = buffered.subarray(9, 9 + length);
        buffered = buffered.subarray(9 + length);
        if (type === 4 && (flags & 1) === 0) socket.write(frame(4, 1, 0, Buffer.alloc(0)));
        else if (type === 1) return end('answered');
        else if (type === 3) return end(`reset ${payload.readUInt32BE(0)}`);
        else if (type === 7) return end(`goaway ${payload.readUInt32BE(4)}`);
      }
    });
    socket.write(Buffer.concat(frames));
  });
}

describe('router: HTTP/2 requests forwarded over HTTP/1.1', () => {
  it('a content-length the DATA frames disagree with, or a connection-specific header, is never forwarded', async () => {
    const request = (method: string, ...more: Array<readonly [string, string]>) => [
      [':method', method] as const,
      [':path', '/api/v1/repositories'] as const,
      [':scheme', 'https'] as const,
      [':authority', `127.0.0.1:${router.port}`] as const,
      ...more,
    ];
    const cases: Record<string, [ReadonlyArray<readonly [string, string]>, string[]]> = {
      'content-length shorter than one DATA frame': [request('POST', ['content-length', '2']), [`ab${SMUGGLED}`]],
      'content-length shorter than two DATA frames': [request('POST', ['content-length', '2']), ['ab', SMUGGLED]],
      'content-length longer than the DATA': [request('POST', ['content-length', '200']), ['ab']],
      'content-length and no DATA': [request('POST', ['content-length', String(SMUGGLED.length)]), []],
      'content-length on a GET without DATA': [request('GET', ['content-length', String(SMUGGLED.length)]), []],
      'transfer-encoding: chunked': [request('POST', ['transfer-encoding', 'chunked']), [`0\r\n\r\n${SMUGGLED}`]],
      'connection: keep-alive': [request('POST', ['connection', 'keep-alive']), ['ab']],
      'te other than trailers': [request('POST', ['te', 'gzip']), ['ab']],
      'a CR LF in the path': [
        [...request('GET').slice(0, 1), [':path', '/a HTTP/1.1\r\nx: y'], ...request('GET').slice(2)],
        [],
      ],
    };
    const from = gateway.logLines().length;
    for (const [name, [headers, data]] of Object.entries(cases))
      expect(await rawStream(headers, data), name).toMatch(/^(reset|goaway) \d+$/);
    // The same stream, well formed, is answered: the refusals above were the framing's.
    expect(await rawStream(request('GET'), [])).toMatch(/^answered/);
    const saw = await gatewaySaw(from, 1);
    expect(saw.map((l) => l.route)).toEqual(['/api/v1/repositories']);
    await expectEachForwardedOnce();
  });

  it('a header field holding CR LF never reaches a gateway, as a line of its own or at all (node:http2 drops it)', async () => {
    const from = gateway.logLines().length;
    // RFC 9113 §8.2.1 makes this request malformed (a reset); node:http2 hands it over without the
    // field (docs/router.md). Written upstream as it came, the second line would authorize it.
    const outcome = await rawStream(
      [
        [':method', 'GET'],
        [':path', '/api/v1/repositories/r/artifacts/none/content'],
        [':scheme', 'https'],
        [':authority', `127.0.0.1:${router.port}`],
        ['x-note', `a\r\nauthorization: Bearer ${key}`],
      ],
      [],
    );
    expect(outcome).toMatch(/^(answered|reset \d+)$/);
    if (outcome === 'answered') {
      const saw = await gatewaySaw(from, 1);
      expect(saw.map((l) => [l.status, l.principal])).toEqual([[401, undefined]]);
    }
    await expectEachForwardedOnce();
  });
});
