import type http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Listening and graceful closing for a node:http server, shared by the gateway and the router:
 * counts requests in flight (a request ends when its response closes), and on close stops
 * accepting, drops idle keep-alive sockets, waits up to `timeoutMs` for in-flight requests, then
 * cuts whatever is left.
 */
export interface GracefulServer {
  readonly inFlight: number;
  listen(port: number, host: string): Promise<AddressInfo>;
  close(timeoutMs: number): Promise<void>;
}

export function makeGraceful(server: http.Server): GracefulServer {
  let inFlight = 0;
  const idle: Array<() => void> = [];
  server.on('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    inFlight++;
    res.once('close', () => {
      inFlight--;
      if (inFlight === 0) for (const resolve of idle.splice(0)) resolve();
    });
  });
  return {
    get inFlight() {
      return inFlight;
    },
    listen(port, host) {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve(server.address() as AddressInfo);
        });
      });
    },
    async close(timeoutMs) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (inFlight > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([new Promise<void>((resolve) => idle.push(resolve)), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
        clearTimeout(timer);
      }
      server.closeAllConnections();
      await closed;
    },
  };
}
