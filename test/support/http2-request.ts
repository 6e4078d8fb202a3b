/** One HTTP/2 request read to its end, for tests that speak HTTP/2 to a TLS gateway themselves. */
import http2 from 'node:http2';

export interface Http2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * On `options.session`, or on a connection of its own to `origin` trusting `ca` (closed after). An
 * error of the session or the stream rejects it; so does no answer within `timeoutMs`, when given.
 */
export async function http2Request(
  origin: string,
  ca: string,
  target: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: Buffer;
    session?: http2.ClientHttp2Session;
    timeoutMs?: number;
  } = {},
): Promise<Http2Answer> {
  const session = options.session ?? http2.connect(origin, { ca });
  let onSessionError: ((err: Error) => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise<Http2Answer>((resolve, reject) => {
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(
          () => reject(new Error(`no answer to ${target} within ${options.timeoutMs} ms`)),
          options.timeoutMs,
        );
        timer.unref();
      }
      onSessionError = reject;
      session.once('error', onSessionError);
      const stream = session.request({ ':method': options.method ?? 'GET', ':path': target, ...options.headers });
      let status = 0;
      let headers: http2.IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      stream.on('response', (h) => {
        headers = h;
        status = Number(h[':status']);
      });
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => resolve({ status, headers, body: Buffer.concat(chunks) }));
      stream.on('error', reject);
      stream.end(options.body);
    });
  } finally {
    clearTimeout(timer);
    // A shared session serves many requests: each one's listener goes with it.
    if (onSessionError) session.off('error', onSessionError);
    if (!options.session) {
      // An error of its own connection after the answer (a late reset, say) is nobody's to hear.
      session.on('error', () => {});
      session.close();
    }
  }
}
