/** The response-head parsing of the S3 store's socket reads (pure; the I/O runs in s3-store.int.test.ts). */
import { describe, expect, it } from 'vitest';
import { acceptedBody, parseResponseHead } from './s3-socket-read.ts';

const head = (text: string) => Buffer.from(text.replace(/\n/g, '\r\n'));

describe('parseResponseHead', () => {
  it('reads the status and lower-cased headers, joins repeated ones, and says where the body starts', () => {
    const bytes = head(
      'HTTP/1.1 206 Partial Content\nContent-Length: 10\nX-A: 1\nx-a: 2\nContent-Range: bytes 5-14/100\n\nBODY',
    );
    const parsed = parseResponseHead(bytes, 'GET /b/k')!;
    expect(parsed.status).toBe(206);
    expect(parsed.headers.get('content-length')).toBe('10');
    expect(parsed.headers.get('x-a')).toBe('1, 2');
    expect(bytes.subarray(parsed.headBytes).toString()).toBe('BODY');
  });

  it('is undefined while the head is incomplete', () => {
    expect(parseResponseHead(head('HTTP/1.1 200 OK\nContent-Length: 1\n'), 'GET /b/k')).toBeUndefined();
  });

  it('refuses what is not an HTTP/1.x head, a broken header line and an endless head', () => {
    expect(() => parseResponseHead(head('SSH-2.0-x\n\n'), 'GET /b/k')).toThrow(/not HTTP\/1.x/);
    expect(() => parseResponseHead(head('HTTP/1.1 200 OK\nno colon here\n\n'), 'GET /b/k')).toThrow(/malformed header/);
    expect(() => parseResponseHead(head('HTTP/1.1 200 OK\nbad name: x\n\n'), 'GET /b/k')).toThrow(/malformed header/);
    expect(() => parseResponseHead(Buffer.alloc(70 * 1024, 'a'), 'GET /b/k')).toThrow(/over 65536 bytes/);
    expect(() => parseResponseHead(head('SSH-2.0-x\n\n'), 'GET /b/k')).toThrow(
      expect.objectContaining({ code: 'upstream_unreachable' }),
    );
  });
});

describe('acceptedBody', () => {
  const parse = (text: string) => parseResponseHead(head(`${text}\n\n`), 'GET /b/k')!;
  it('takes a 206 that starts where asked and whose length matches its range', () => {
    expect(
      acceptedBody(parse('HTTP/1.1 206 Partial Content\nContent-Length: 10\nContent-Range: bytes 5-14/100'), 5, 14),
    ).toEqual({
      length: 10,
      size: 100,
    });
  });
  it('takes a 200 only for a range from byte 0 (a server that ignored Range sends the whole object)', () => {
    expect(acceptedBody(parse('HTTP/1.1 200 OK\nContent-Length: 100'), 0, 49)).toEqual({ length: 100, size: 100 });
    expect(acceptedBody(parse('HTTP/1.1 200 OK\nContent-Length: 100'), 5, 49)).toBeUndefined();
  });
  it('takes a 206 that ends at the object end before the end asked, never one that stops short inside the object', () => {
    const ending = parse('HTTP/1.1 206 Partial Content\nContent-Length: 5\nContent-Range: bytes 95-99/100');
    expect(acceptedBody(ending, 95, 199)).toEqual({ length: 5, size: 100 });
    // Read as far as it goes, its end would look like the blob's: the store's failure, left to undici to refuse.
    const short = parse('HTTP/1.1 206 Partial Content\nContent-Length: 10\nContent-Range: bytes 5-14/100');
    expect(acceptedBody(short, 5, 20)).toBeUndefined();
  });
  it('leaves everything else to undici: errors, other starts, chunked or unsized bodies, inconsistent ranges', () => {
    for (const [text, start] of [
      ['HTTP/1.1 404 Not Found\nContent-Length: 120', 0],
      ['HTTP/1.1 307 Temporary Redirect\nLocation: /x\nContent-Length: 0', 0],
      ['HTTP/1.1 206 Partial Content\nContent-Length: 10\nContent-Range: bytes 6-15/100', 5],
      ['HTTP/1.1 206 Partial Content\nContent-Length: 11\nContent-Range: bytes 5-14/100', 5],
      ['HTTP/1.1 206 Partial Content\nContent-Length: 10\nContent-Range: bytes */100', 5],
      ['HTTP/1.1 200 OK\nTransfer-Encoding: chunked', 0],
      ['HTTP/1.1 200 OK\nContent-Length: 10\nTransfer-Encoding: chunked', 0],
      ['HTTP/1.1 200 OK', 0],
      ['HTTP/1.1 200 OK\nContent-Length: 10, 10', 0],
    ] as const) {
      expect(acceptedBody(parse(text), start, start + 9), text).toBeUndefined();
    }
  });
});
