import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FrontDoor } from './front-door.ts';

/**
 * Listening and graceful closing for a node:http server, shared by the gateway and the router:
 * counts requests in flight (a request ends when its response closes), and on close drains through
 * the front door (idle keep-alive connections closed, new requests other than health checks 503,
 * every answer closes its connection), waits up to `timeoutMs` for in-flight requests, then stops
 * listening and cuts whatever is left.
 */
export interface GracefulServer {
  readonly inFlight: number;
  /** `shared`: one of several workers listening on the port (SO_REUSEPORT; the kernel spreads connections). */
  listen(port: number, host: string, shared?: boolean): Promise<AddressInfo>;
  close(timeoutMs: number): Promise<void>;
}

export function makeGraceful(server: http.Server, frontDoor: Pick<FrontDoor, 'drain'>): GracefulServer {
  let inFlight = 0;
  const idle: Array<() => void> = [];
  const begun = (_req: http.IncomingMessage, res: http.ServerResponse) => {
    inFlight++;
    res.once('close', () => {
      inFlight--;
      if (inFlight === 0) for (const resolve of idle.splice(0)) resolve();
    });
  };
  // A request with `Expect: 100-continue` arrives as 'checkContinue' instead of 'request' (front-door.ts).
  server.on('request', begun);
  server.on('checkContinue', begun);
  return {
    get inFlight() {
      return inFlight;
    },
    listen(port, host, shared = false) {
      return new Promise((resolve, reject) => {
        server.once('error', reject);
        // `exclusive`: a cluster worker binds its own socket rather than asking the primary for one.
        const options = shared ? { port, host, reusePort: true, exclusive: true } : { port, host };
        server.listen(options, () => {
          server.off('error', reject);
          resolve(server.address() as AddressInfo);
        });
      });
    },
    async close(timeoutMs) {
      frontDoor.drain();
      if (inFlight > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((resolve) => idle.push(resolve)),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs))),
        ]);
        clearTimeout(timer);
      }
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}
