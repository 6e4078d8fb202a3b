/** One HTTP/2 request read to its end, for tests that speak HTTP/2 to a TLS gateway themselves. */
import http2 from 'node:http2';

export interface Http2Answer {
  status: number;
  body: Buffer;
}

/** On `options.session`, or on a connection of its own to `origin` trusting `ca` (closed after). */
export function http2Request(
  origin: string,
  ca: string,
  target: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: Buffer;
    session?: http2.ClientHttp2Session;
  } = {},
): Promise<Http2Answer> {
  const session = options.session ?? http2.connect(origin, { ca });
  if (!options.session) session.on('error', () => {});
  return new Promise<Http2Answer>((resolve, reject) => {
    const stream = session.request({ ':method': options.method ?? 'GET', ':path': target, ...options.headers });
    let status = 0;
    const chunks: Buffer[] = [];
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve({ status, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    stream.end(options.body);
  }).finally(() => {
    if (!options.session) session.close();
  });
}
