import http2 from 'node:http2';
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { AUTHORITY_MISMATCH, asHttp1Head } from './http2-head.ts';

/** An HTTP/2 request object (node:http2's compatibility API) with this raw head, its stream ended after it or not. */
function http2Request(rawHeaders: string[], endAfterHeaders = true): IncomingMessage {
  const headers: Record<string, string> = {};
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    headers[name] =
      name in headers ? `${headers[name]}${name === 'cookie' ? '; ' : ', '}${rawHeaders[i + 1]}` : rawHeaders[i + 1]!;
  }
  const req = Object.create(http2.Http2ServerRequest.prototype) as IncomingMessage;
  for (const [name, value] of Object.entries({ rawHeaders, headers, stream: { endAfterHeaders } }))
    Object.defineProperty(req, name, { value, configurable: true });
  return req;
}

const pseudo = [':method', 'GET', ':scheme', 'https', ':authority', 'files.example', ':path', '/a'];

describe('asHttp1Head: an HTTP/2 request as the HTTP/1.1 head forwarded', () => {
  it('joins cookie crumbs into one Cookie with "; " where the first stood (RFC 9113 §8.2.3)', () => {
    const req = http2Request([...pseudo, 'cookie', 'a=1', 'accept', '*/*', 'cookie', 'b=2', 'cookie', 'c=3']);
    expect(asHttp1Head(req)).toBeUndefined();
    expect(req.rawHeaders).toEqual(['host', 'files.example', 'cookie', 'a=1; b=2; c=3', 'accept', '*/*']);
    // One crumb is left as it is.
    const one = http2Request([':method', 'GET', 'cookie', 'a=1']);
    asHttp1Head(one);
    expect(one.rawHeaders).toEqual(['cookie', 'a=1']);
  });

  it('takes Host from :authority, refuses another one, and announces a body without length as chunked', () => {
    const req = http2Request([...pseudo, 'host', 'FILES.example', 'x-a', '1'], false);
    expect(asHttp1Head(req)).toBeUndefined();
    expect(req.rawHeaders).toEqual(['host', 'files.example', 'x-a', '1', 'transfer-encoding', 'chunked']);
    expect(req.headers['transfer-encoding']).toBe('chunked');
    expect(asHttp1Head(http2Request([...pseudo, 'host', 'other.example']))).toBe(AUTHORITY_MISMATCH);
    const bare = http2Request([':method', 'GET', 'host', 'h']);
    asHttp1Head(bare);
    expect(bare.rawHeaders).toEqual(['host', 'h']);
  });

  it('leaves an HTTP/1.1 request alone', () => {
    const req = { rawHeaders: ['Cookie', 'a=1', 'Cookie', 'b=2'], headers: {} } as unknown as IncomingMessage;
    expect(asHttp1Head(req)).toBeUndefined();
    expect(req.rawHeaders).toEqual(['Cookie', 'a=1', 'Cookie', 'b=2']);
  });
});
