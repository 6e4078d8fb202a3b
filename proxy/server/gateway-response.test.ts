import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayResponse } from './gateway-response.ts';

type Handler = (res: GatewayResponse) => void;

/** A real server whose responses are GatewayResponse; each test installs its handler. */
let handler: Handler = (res) => res.end();
const server = http.createServer({ ServerResponse: GatewayResponse }, (_req, res) => handler(res));

beforeAll(() => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve)));
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** The raw header lines of one answer (names as sent, in order), without the ones Node adds itself. */
async function rawHeaders(h: Handler): Promise<{ status: number; headers: [string, string][] }> {
  handler = h;
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
        res.resume();
        const pairs: [string, string][] = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i]!;
          if (!['date', 'connection', 'keep-alive', 'transfer-encoding'].includes(name.toLowerCase()))
            pairs.push([name, res.rawHeaders[i + 1]!]);
        }
        res.on('end', () => resolve({ status: res.statusCode!, headers: pairs }));
      })
      .on('error', reject);
  });
}

describe('GatewayResponse early headers', () => {
  it('go out first, with the headers given to writeHead, each once', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('x-request-id', 'r1');
      res.addEarlyHeader('RateLimit', '"a";r=1;t=2');
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' }).end('ok');
    });
    expect(got).toEqual({
      status: 200,
      headers: [
        ['x-request-id', 'r1'],
        ['ratelimit', '"a";r=1;t=2'],
        ['content-type', 'text/plain'],
        ['content-length', '2'],
      ],
    });
  });

  it('keep the headers given after an undefined reason, as node:http does', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('x-request-id', 'r3');
      res.writeHead(204, undefined, { 'x-given': 'yes' }).end();
    });
    expect(got.headers).toEqual([
      ['x-request-id', 'r3'],
      ['x-given', 'yes'],
    ]);
  });

  it('yield to a header of the same name given to writeHead, and a second add replaces the first', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('ratelimit', 'early');
      res.addEarlyHeader('x-request-id', 'first');
      res.addEarlyHeader('x-request-id', 'second');
      res.writeHead(429, 'Too Many', { ratelimit: 'given', 'content-length': '0' }).end();
    });
    expect(got.status).toBe(429);
    expect(got.headers).toEqual([
      ['x-request-id', 'second'],
      ['ratelimit', 'given'],
      ['content-length', '0'],
    ]);
  });

  it('yield to a raw header list, compared without case', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('x-request-id', 'early');
      res.writeHead(200, ['X-Request-Id', 'given', 'content-length', '0']).end();
    });
    expect(got.headers).toEqual([
      ['X-Request-Id', 'given'],
      ['content-length', '0'],
    ]);
  });

  it('join headers set with setHeader, which still lose to the ones given to writeHead', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('x-request-id', 'r2');
      res.addEarlyHeader('ratelimit', 'early');
      res.setHeader('connection', 'close');
      res.setHeader('x-set', 'set');
      res.writeHead(200, { 'x-set': 'given', ratelimit: 'given', 'content-length': '0' }).end();
    });
    expect(Object.fromEntries(got.headers.map(([n, v]) => [n.toLowerCase(), v]))).toEqual({
      'x-request-id': 'r2',
      ratelimit: 'given',
      'x-set': 'given',
      'content-length': '0',
    });
    expect(got.headers.filter(([n]) => n.toLowerCase() === 'ratelimit')).toHaveLength(1);
  });

  it('go out with implicit headers (end without writeHead)', async () => {
    const got = await rawHeaders((res) => {
      res.addEarlyHeader('x-request-id', 'r3');
      res.statusCode = 404;
      res.end();
    });
    expect(got.status).toBe(404);
    expect(got.headers).toContainEqual(['x-request-id', 'r3']);
  });
});
