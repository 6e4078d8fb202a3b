/** One HTTPS request read to its end, for tests that speak to a TLS gateway themselves. */
import https from 'node:https';
import type { TLSSocket } from 'node:tls';

export interface HttpsAnswer {
  status: number;
  body: Buffer;
  serial: string | undefined;
  localPort: number | undefined;
}

/** One HTTPS request trusting `ca`; `agent` for keep-alive and client certificates. */
export function httpsRequest(
  url: string,
  options: { ca: string; method?: string; headers?: Record<string, string>; body?: Buffer; agent?: https.Agent },
): Promise<HttpsAnswer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      url,
      {
        method: options.method ?? 'GET',
        headers: options.headers,
        ca: options.ca,
        agent: options.agent ?? false,
      },
      (res) => {
        const socket = res.socket as TLSSocket;
        const serial = socket.getPeerCertificate?.().serialNumber;
        const localPort = socket.localPort;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), serial, localPort }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}
