/**
 * Hop-by-hop abuse through a real router in front of a real gateway (its PostgreSQL), raw sockets as
 * the client: a `Connection` header that lists end-to-end headers, so that a proxy strips them, never
 * makes the gateway see another client address than the client's (not the router's, not one the
 * client names), another target than the client's `Host`, or another principal; and an HTTP/2
 * stream the router resets after the gateway answered never leaves a gateway connection held. The
 * router runs on TLS (HTTP/1.1 and HTTP/2 on one port) under a descriptor limit of its own.
 */
import http2 from 'node:http2';
import { readdirSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { problemLines, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { startTlsRouter } from '../../test/support/tls-router.ts';
import { defaultMaxInFlight } from './router-server.ts';

const db = useTestDatabase();
/** The router's descriptor limit: small enough that held gateway connections would exhaust it. */
const DESCRIPTORS = 200;
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
      ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
      // A connection the router leaves un-ended stays open this long: well past the test.
      ARKVORY_KEEPALIVE_TIMEOUT_SECONDS: '60',
      // Heads its parser refused are logged at debug ("client error").
      ARKVORY_LOG_LEVEL: 'debug',
    },
  });
  await startTlsRouter(gateway, {
    wrap: ['prlimit', `--nofile=${DESCRIPTORS}:${DESCRIPTORS}`, '--'],
    // The file's helpers speak to the module's router: set before the first try.
    forwards: async (started, authority) => {
      router = started;
      ca = authority;
      return (await http1(`GET /api/v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).status === 404;
    },
  });
}, 90_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  await gateway?.stop('SIGTERM');
});

interface Answer {
  status: number;
  head: string;
  body: string;
}

/**
 * One HTTP/1.1 request written by hand on a TLS connection of its own from 127.0.0.2 (never the
 * router's address), `Connection: close` among what `head` lists; the answer read up to the close.
 */
function http1(head: string, body = ''): Promise<Answer> {
  return new Promise((resolve, reject) => {
    // node:tls types take no localAddress: the TCP connection is made first, from that address.
    const tcp = net.connect({ host: '127.0.0.1', localAddress: '127.0.0.2', port: router.port });
    const socket = tls.connect({ socket: tcp, ca, servername: 'localhost' }, () =>
      socket.write(Buffer.from(head + body, 'latin1')),
    );
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (text += d));
    socket.on('error', reject);
    socket.on('close', () => {
      const end = text.indexOf('\r\n\r\n');
      resolve({ status: Number(text.slice(9, 12)), head: text.slice(0, end), body: text.slice(end + 4) });
    });
  });
}

const requestIdOf = (answer: Answer) => /\r\nx-request-id: *([^\r]+)/i.exec(answer.head)?.[1];

describe('a Connection header listing end-to-end headers', () => {
  it('never changes the client address the gateway records: not the router, not one the client names', async () => {
    const data = 'bytes';
    const answer = await http1(
      `PUT /api/v1/repositories/r/artifacts/addr HTTP/1.1\r\nHost: files.example\r\nAuthorization: Bearer ${key}\r\n` +
        `X-Forwarded-For: 203.0.113.9\r\nForwarded: for=203.0.113.9\r\nContent-Length: ${data.length}\r\n` +
        `Connection: close, X-Forwarded-For, Forwarded, X-Forwarded-Proto, X-Forwarded-Host, X-Request-Id\r\n\r\n`,
      data,
    );
    expect(answer.status).toBe(201);
    // The audit trail's source is the gateway's client address (rate limits and bans read the same).
    const { rows } = await db.pool.query<{ source: string }>(
      'SELECT source FROM arkvory_audit_events WHERE client_request_id = $1',
      [requestIdOf(answer)],
    );
    expect(rows).toEqual([{ source: '127.0.0.2' }]);
  });

  it('never drops Host: the gateway answers for the target the client named, and its links carry it', async () => {
    const auth = `Authorization: Bearer ${key}\r\n`;
    const put = await http1(
      `PUT /api/v1/repositories/r/artifacts/host HTTP/1.1\r\nHost: files.example\r\n${auth}Content-Length: 1\r\nConnection: close\r\n\r\n`,
      'x',
    );
    expect(put.status).toBe(201);
    // Dropped, the gateway got no Host over node:http: node answered a bare 400 it never logged.
    const presign = await http1(
      `POST /api/v1/repositories/r/artifacts/host/presign HTTP/1.1\r\nHost: files.example\r\n${auth}` +
        `Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close, Host\r\n\r\n`,
      '{}',
    );
    expect(presign.status).toBe(201);
    expect((JSON.parse(presign.body) as { url: string }).url).toMatch(
      /^https:\/\/files\.example\/api\/v1\/repositories\/r\/artifacts\/host\/content\?/,
    );
    const head = await http1(
      `HEAD /api/v1/repositories/r/artifacts/host/content HTTP/1.1\r\nHost: files.example\r\n${auth}Connection: Host, close\r\n\r\n`,
    );
    expect(head.status).toBe(200);
    // Each was the gateway's answer to the request the router forwarded.
    const forwarded = [presign, head].map(requestIdOf);
    await waitUntil(
      () => forwarded.every((id) => gateway.logLines().some((l) => l.msg === 'request' && l.clientReqId === id)),
      { what: "the gateway's request lines" },
    );
  });

  it("a request that names no authority never gets the gateway's own address: no link to it past the router", async () => {
    // HTTP/1.0 needs no Host. Forwarded without one, the HTTP clients sent the gateway's address,
    // and the gateway made the pre-signed link from it.
    const presign = await http1(
      `POST /api/v1/repositories/r/artifacts/host/presign HTTP/1.0\r\nAuthorization: Bearer ${key}\r\n` +
        `Content-Type: application/json\r\nContent-Length: 2\r\n\r\n`,
      '{}',
    );
    expect(presign.status).toBe(201);
    const { url } = JSON.parse(presign.body) as { url: string };
    expect(url).not.toContain(String(gateway.port));
    expect(url).toMatch(/^\/api\/v1\/repositories\/r\/artifacts\/host\/content\?/);
    // Reads and HEADs without Host still go through (undici and node:http alike).
    const auth = `Authorization: Bearer ${key}\r\n`;
    expect((await http1(`GET /api/v1/repositories/r/artifacts/host/content HTTP/1.0\r\n${auth}\r\n`)).body).toBe('x');
    expect((await http1(`HEAD /api/v1/repositories/r/artifacts/host/content HTTP/1.0\r\n${auth}\r\n`)).status).toBe(
      200,
    );
  });

  it('never drops the credentials, Range or the conditionals: the gateway answers the request the client sent', async () => {
    const auth = `Authorization: Bearer ${key}\r\n`;
    const put = await http1(
      `PUT /api/v1/repositories/r/artifacts/named HTTP/1.1\r\nHost: files.example\r\n${auth}Content-Length: 6\r\nConnection: close\r\n\r\n`,
      'abcdef',
    );
    expect(put.status).toBe(201);
    const etag = /\r\netag: *([^\r]+)/i.exec(put.head)?.[1];
    expect(etag).toBeDefined();
    // Dropped, this was a 401 (a request of nobody); with only the credentials kept, a whole 200
    // body where the client resumes at byte 2 of the object its If-Range names.
    const answer = await http1(
      `GET /api/v1/repositories/r/artifacts/named/content HTTP/1.1\r\nHost: files.example\r\n${auth}` +
        `Cookie: a=1\r\nRange: bytes=2-\r\nIf-Range: ${etag}\r\n` +
        `Connection: close, Authorization, Cookie, Range, If-Range\r\n\r\n`,
    );
    expect(answer.status).toBe(206);
    expect(answer.body).toBe('cdef');
  });
});

describe('a head that fits the router but not a gateway once the forwarding headers are in', () => {
  it('is refused by the router with a reason, over HTTP/1.1 and HTTP/2; the gateway never parses it', async () => {
    const target = '/api/v1/repositories/r/artifacts/host/content';
    const auth = `Bearer ${key}`;
    // Under node:http's 16 KiB (target, names and values) as the client sends it, over it with the
    // router's X-Forwarded-For, Forwarded, X-Forwarded-Proto, X-Forwarded-Host and x-request-id.
    const filler = 'a'.repeat(
      16_384 -
        target.length -
        'Host'.length -
        'h'.length -
        'Authorization'.length -
        auth.length -
        'X-Pad'.length -
        'Connection'.length -
        'close'.length -
        50,
    );
    const before = gateway.logLines().length;
    const answer = await http1(
      `GET ${target} HTTP/1.1\r\nHost: h\r\nAuthorization: ${auth}\r\nX-Pad: ${filler}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toMatchObject({ code: 'malformed_request' });
    // HTTP/2 announces a larger header list (16 KiB plus 32 bytes per field) than HTTP/1.1 takes.
    const session = http2.connect(`https://127.0.0.1:${router.port}`, { ca });
    session.on('error', () => {});
    const h2 = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request({ ':path': target, authorization: auth, 'x-pad': 'a'.repeat(17_000) });
      let status = 0;
      let body = '';
      stream.on('response', (h) => (status = Number(h[':status'])));
      stream.on('data', (d: Buffer) => (body += d.toString()));
      stream.on('end', () => resolve({ status, body }));
      stream.on('error', reject);
    });
    session.close();
    expect(h2.status).toBe(400);
    expect(JSON.parse(h2.body)).toMatchObject({ code: 'malformed_request' });
    await waitUntil(() => router.logLines().filter((l) => l.kind === 'head_too_large').length >= 2, {
      what: "the router's head_too_large lines",
    });
    // A request after them: the gateway's lines are in by its own, and none is a head it could not parse.
    const marker = await http1(`GET /api/v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    const markerId = requestIdOf(marker);
    await waitUntil(() => gateway.logLines().some((l) => l.msg === 'request' && l.clientReqId === markerId), {
      what: "the marker's gateway line",
    });
    expect(
      gateway
        .logLines()
        .slice(before)
        .filter((l) => l.msg === 'client error'),
    ).toEqual([]);
  });
});

describe('a client that resets its connection right after its request', () => {
  it("is never taken for the router: its DELETEs are not acted on in the name of the router's address", async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `reset${i}`);
    for (const id of ids) {
      const put = await http1(
        `PUT /api/v1/repositories/r/artifacts/${id} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer ${key}\r\n` +
          `Content-Length: 1\r\nConnection: close\r\n\r\n`,
        'x',
      );
      expect(put.status).toBe(201);
    }
    const lines = () => router.logLines().filter((l) => l.msg === 'request' && l.method === 'DELETE');
    const from = lines().length;
    // The socket of a connection reset under its request reads no peer: forwarded, the request named
    // its client `unknown`, which a gateway trusting the router reads as the router itself.
    for (const id of ids)
      await new Promise<void>((resolve) => {
        const tcp = net.connect({ host: '127.0.0.1', localAddress: '127.0.0.2', port: router.port });
        tcp.on('error', () => {});
        const socket = tls.connect({ socket: tcp, ca, servername: 'localhost' }, () => {
          socket.write(
            `DELETE /api/v1/repositories/r/artifacts/${id} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer ${key}\r\n\r\n`,
            () => {
              tcp.resetAndDestroy();
              resolve();
            },
          );
        });
        socket.on('error', () => {});
      });
    await waitUntil(() => lines().length >= from + ids.length, { what: "the router's DELETE lines" });
    // Whatever reached the gateway was acted on (or not) before its request line.
    const forwarded = lines()
      .slice(from)
      .filter((l) => Number(l.attempts) > 0)
      .map((l) => l.reqId);
    await waitUntil(
      () => forwarded.every((id) => gateway.logLines().some((l) => l.msg === 'request' && l.clientReqId === id)),
      { what: "the gateway's lines of the forwarded DELETEs" },
    );
    const { rows } = await db.pool.query<{ source: string }>(
      `SELECT source FROM arkvory_audit_events WHERE action = 'artifact.delete' AND target->>'id' = ANY($1)`,
      [ids],
    );
    expect(rows.filter((r) => r.source !== '127.0.0.2')).toEqual([]);
  });
});

describe('an HTTP/2 stream reset after the gateway answered', () => {
  it('frees its gateway connection at once: streams sending their whole body without END_STREAM cannot exhaust the router', async () => {
    const pid = router.child.pid!;
    const open = () => readdirSync(`/proc/${pid}/fd`).length;
    const before = open();
    // More such streams than the router has descriptors: each held one gateway connection until
    // the gateway's keep-alive timeout, counted by no bound (its request had left the in-flight count).
    const batch = 20;
    const batches = Math.ceil(DESCRIPTORS / batch);
    expect(batch * batches).toBeGreaterThan(DESCRIPTORS - before);
    expect(batch).toBeLessThan(defaultMaxInFlight(DESCRIPTORS, true));
    const session = http2.connect(`https://127.0.0.1:${router.port}`, { ca });
    session.on('error', () => {});
    // A presign reads its JSON body (Content-Length: 2) whole and answers, keeping its connection;
    // the client never ends its stream, so the router resets it after the answer.
    const stream = (i: number) =>
      new Promise<number>((resolve) => {
        const s = session.request(
          {
            ':method': 'POST',
            ':path': `/api/v1/repositories/r/artifacts/missing${i}/presign`,
            authorization: `Bearer ${key}`,
            'content-type': 'application/json',
            'content-length': '2',
          },
          { endStream: false },
        );
        let status = 0;
        s.on('response', (headers) => (status = Number(headers[':status'])));
        s.resume();
        s.on('error', () => {});
        s.on('close', () => resolve(status));
        s.write('{}');
      });
    const statuses: number[] = [];
    for (let b = 0; b < batches; b++)
      statuses.push(...(await Promise.all(Array.from({ length: batch }, (_, i) => stream(b * batch + i)))));
    session.close();
    // Each the gateway's own answer (no such artifact), none the router's 503 for want of descriptors.
    expect(new Set(statuses)).toEqual(new Set([404]));
    await waitUntil(() => open() <= before + 2, { what: "the router's gateway connections to close", timeoutMs: 2000 });
    expect((await http1(`GET /api/v1/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).status).toBe(404);
    expect(problemLines(router.logLines())).toEqual([]);
  });
});
