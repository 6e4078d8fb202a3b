/** Helpers for content tests: deterministic bytes, digests, raw HTTP calls and multipart parsing. */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import http from '../../lib/node-http.ts';

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export function contentDigest(data: Buffer): string {
  return `sha-256=:${createHash('sha256').update(data).digest('base64')}:`;
}

export function randomContent(size: number): Buffer {
  return randomBytes(size);
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * One HTTP request through node:http (no client-side decoding or header rewriting); over https
 * (node:https) when `url` says so, trusting `ca` (PEM).
 */
export function request(
  url: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: Buffer | AsyncIterable<Buffer>;
    ca?: string | Buffer;
    /** The address the request connects from (`127.0.0.2`: a peer other than the usual loopback one). */
    localAddress?: string;
  } = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const client = url.startsWith('https:') ? https : http;
    const req = client.request(
      url,
      {
        method: options.method ?? 'GET',
        headers: options.headers ?? {},
        agent: false,
        ...(options.ca === undefined ? {} : { ca: options.ca }),
        ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    const body = options.body;
    if (body === undefined) req.end();
    else if (Buffer.isBuffer(body)) req.end(body);
    else
      void (async () => {
        try {
          for await (const chunk of body) if (!req.write(chunk)) await new Promise((r) => req.once('drain', r));
          req.end();
        } catch (err) {
          req.destroy(err as Error);
        }
      })();
  });
}

/**
 * A GET through node:http whose body is hashed as it arrives, never held: for many large downloads
 * at once (a `fetch` body costs several times the CPU per byte, and buffering costs their size).
 */
export function requestDigest(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; sha256: string; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      const hash = createHash('sha256');
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        hash.update(c);
        bytes += c.length;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, sha256: hash.digest('hex'), bytes }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

export interface Part {
  headers: Record<string, string>;
  data: Buffer;
}

/** Parses a multipart/byteranges body strictly (RFC 2046 framing); throws on anything unexpected. */
export function parseMultipart(body: Buffer, contentType: string): Part[] {
  const match = /boundary=("?)([^";]+)\1/.exec(contentType);
  if (!match) throw new Error(`no boundary in ${contentType}`);
  const delimiter = Buffer.from(`--${match[2]}`);
  const parts: Part[] = [];
  let pos = body.indexOf(delimiter);
  if (pos !== 0) throw new Error('body does not start with the boundary');
  for (;;) {
    pos += delimiter.length;
    if (body.subarray(pos, pos + 4).toString() === '--\r\n' && pos + 4 === body.length) return parts;
    if (body.subarray(pos, pos + 2).toString() !== '\r\n') throw new Error('boundary not followed by CRLF');
    pos += 2;
    const headerEnd = body.indexOf('\r\n\r\n', pos);
    const headers: Record<string, string> = {};
    for (const line of body.subarray(pos, headerEnd).toString('latin1').split('\r\n')) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(headers['content-range'] ?? '');
    if (!range) throw new Error(`part without a valid content-range: ${JSON.stringify(headers)}`);
    const length = Number(range[2]) - Number(range[1]) + 1;
    const dataStart = headerEnd + 4;
    parts.push({ headers, data: body.subarray(dataStart, dataStart + length) });
    pos = dataStart + length;
    if (body.subarray(pos, pos + 2).toString() !== '\r\n') throw new Error('part data not followed by CRLF');
    pos += 2;
    if (!body.subarray(pos, pos + delimiter.length).equals(delimiter)) throw new Error('missing boundary after part');
  }
}
