import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Http2Request, Http2Response } from './http2-messages.ts';

type Handler = (res: Http2Response) => void;

/** A real HTTP/2 server (cleartext) whose responses are Http2Response; each test installs its handler. */
let handler: Handler = (res) => res.end();
const server = http2.createServer(
  { Http2ServerRequest: Http2Request, Http2ServerResponse: Http2Response } as http2.ServerOptions,
  (_req, res) => handler(res as unknown as Http2Response),
);
let client: http2.ClientHttp2Session;
/** Errors of the client's session: none is expected (afterAll checks). */
const sessionErrors: unknown[] = [];

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  client.on('error', (err) => sessionErrors.push(err));
});
afterAll(async () => {
  expect(sessionErrors).toEqual([]);
  client.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

interface Answer {
  status: number;
  /** Fields in the order sent, pseudo-fields and Date left out. */
  headers: [string, string][];
  hasDate: boolean;
  body: string;
}

async function answer(h: Handler, method = 'GET'): Promise<Answer> {
  handler = h;
  return new Promise((resolve, reject) => {
    const req = client.request({ ':method': method, ':path': '/' }, { endStream: true });
    let status = 0;
    let hasDate = false;
    const headers: [string, string][] = [];
    req.on('response', (_h, _flags, raw) => {
      for (let i = 0; i < raw.length; i += 2) {
        const name = raw[i]!;
        if (name === ':status') status = Number(raw[i + 1]);
        else if (name === 'date') hasDate = true;
        else headers.push([name, raw[i + 1]!]);
      }
    });
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve({ status, headers, hasDate, body: Buffer.concat(chunks).toString() }));
    req.on('error', reject);
  });
}

describe('Http2Response', () => {
  it('sends the early headers first, the given ones after, each once, and a Date', async () => {
    const got = await answer((res) => {
      res.addEarlyHeader('x-request-id', 'r1');
      res.addEarlyHeader('RateLimit', '"a";r=1;t=2');
      res.addEarlyHeader('x-request-id', 'r2');
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' }).end('ok');
    });
    expect(got).toEqual({
      status: 200,
      headers: [
        ['x-request-id', 'r2'],
        ['ratelimit', '"a";r=1;t=2'],
        ['content-type', 'text/plain'],
        ['content-length', '2'],
      ],
      hasDate: true,
      body: 'ok',
    });
  });

  it('lets a header given to writeHead win over an early one (object or list) and drops connection headers', async () => {
    const fromObject = await answer((res) => {
      res.addEarlyHeader('ratelimit', 'early');
      res.writeHead(429, 'Too Many', { ratelimit: 'given', connection: 'close', 'content-length': '0' }).end();
    });
    expect(fromObject.status).toBe(429);
    expect(fromObject.headers).toEqual([
      ['ratelimit', 'given'],
      ['content-length', '0'],
    ]);
    const fromList = await answer((res) => {
      res.addEarlyHeader('x-request-id', 'early');
      res.writeHead(200, ['X-Request-Id', 'given', 'Transfer-Encoding', 'chunked', 'content-length', '0']).end();
    });
    expect(fromList.headers).toEqual([
      ['x-request-id', 'given'],
      ['content-length', '0'],
    ]);
  });

  it('merges with headers set progressively, which lose to the given ones and drop connection headers', async () => {
    const got = await answer((res) => {
      res.addEarlyHeader('x-request-id', 'r3');
      res.addEarlyHeader('ratelimit', 'early');
      res.setHeader('connection', 'close');
      res.setHeader('x-set', 'set');
      res.writeHead(200, { 'x-set': 'given', ratelimit: 'given', 'content-length': '0' }).end();
    });
    expect(Object.fromEntries(got.headers)).toEqual({
      'x-request-id': 'r3',
      ratelimit: 'given',
      'x-set': 'given',
      'content-length': '0',
    });
    expect(got.headers).toHaveLength(4);
  });

  it('sends the early headers with an implicit head (end without writeHead), also to a HEAD request', async () => {
    const got = await answer((res) => {
      res.addEarlyHeader('x-request-id', 'r4');
      res.statusCode = 404;
      res.end();
    });
    expect(got).toMatchObject({ status: 404, headers: [['x-request-id', 'r4']], body: '' });
    const head = await answer((res) => {
      res.addEarlyHeader('x-request-id', 'r5');
      res.writeHead(200, { 'content-length': '10' });
      res.end();
    }, 'HEAD');
    expect(head).toMatchObject({
      status: 200,
      headers: [
        ['x-request-id', 'r5'],
        ['content-length', '10'],
      ],
      body: '',
    });
  });

  it('refuses an informational or out-of-range status as node:http2 does, and a second head', async () => {
    const errors: unknown[] = [];
    const got = await answer((res) => {
      for (const status of [103, 600]) {
        try {
          res.writeHead(status);
        } catch (err) {
          errors.push((err as NodeJS.ErrnoException).code);
        }
      }
      res.writeHead(204).end();
      try {
        res.writeHead(200);
      } catch (err) {
        errors.push((err as NodeJS.ErrnoException).code);
      }
    });
    expect(got.status).toBe(204);
    expect(errors).toEqual(['ERR_HTTP2_INFO_STATUS_NOT_ALLOWED', 'ERR_HTTP2_STATUS_INVALID', 'ERR_HTTP2_HEADERS_SENT']);
  });
});
