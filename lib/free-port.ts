/** A loopback port free at the moment of asking (the embedded PostgreSQL, tests and benchmarks). */
import { readFileSync } from 'node:fs';
import net from 'node:net';

/** The lowest port handed out below the ephemeral range. */
const FLOOR = 10_000;

/**
 * Ports fetch refuses to connect to ("bad ports", fetch.spec.whatwg.org/#port-blocking): a server
 * there cannot be reached by fetch (Node's included) or a browser. Of the standard's list only 10080
 * lies at or above FLOOR; undici keeps its copy of the list internal.
 */
export const FETCH_BLOCKED_PORTS: ReadonlySet<number> = new Set([10080]);

/** Whether `port` may be handed out: not avoided, and reachable by fetch. */
export function usablePort(port: number, avoid: ReadonlySet<number>): boolean {
  return !avoid.has(port) && !FETCH_BLOCKED_PORTS.has(port);
}

/**
 * A port on 127.0.0.1 that nothing listens on, for a server started next. It is taken from below
 * the kernel's ephemeral range when that leaves room: a port from the range (what binding port 0
 * gives) can become the local port of any outgoing connection on the host before the server binds
 * it, and the server's listen then fails with EADDRINUSE. Falls back to the kernel's choice.
 * Never one of `avoid` (ports free now because their own server has not bound them yet), nor a
 * port fetch refuses.
 */
export async function freeLoopbackPort(avoid: ReadonlySet<number> = new Set()): Promise<number> {
  const low = ephemeralLow();
  for (let attempt = 0; low - FLOOR >= 1000 && attempt < 50; attempt++) {
    const candidate = FLOOR + Math.floor(Math.random() * (low - FLOOR));
    if (!usablePort(candidate, avoid)) continue;
    const port = await bindable(candidate);
    if (port !== undefined) return port;
  }
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await bindable(0);
    if (port !== undefined && usablePort(port, avoid)) return port;
  }
  throw new Error('no free loopback port');
}

/** The first port of the range outgoing connections' local ports come from (Linux; else the usual default). */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isSafeInteger(low) && low > 0) return low;
  } catch {
    // Not Linux, or /proc not mounted.
  }
  return 32_768;
}

/** Binds `port` (0: the kernel picks) on 127.0.0.1 and closes again: the port, or undefined when taken. */
function bindable(port: number): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'EADDRINUSE' || err.code === 'EACCES' ? resolve(undefined) : reject(err),
    );
    srv.listen(port, '127.0.0.1', () => {
      const bound = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(bound));
    });
  });
}
