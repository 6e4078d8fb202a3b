/** A loopback port free at the moment of asking (the embedded PostgreSQL, tests and benchmarks). */
import { readFileSync } from 'node:fs';
import net from 'node:net';

/** The lowest port handed out below the ephemeral range. */
const FLOOR = 10_000;

/**
 * A port on 127.0.0.1 that nothing listens on, for a server started next. It is taken from below
 * the kernel's ephemeral range when that leaves room: a port from the range (what binding port 0
 * gives) can become the local port of any outgoing connection on the host before the server binds
 * it, and the server's listen then fails with EADDRINUSE. Falls back to the kernel's choice.
 * Never one of `avoid`: ports free now because their own server has not bound them yet.
 */
export async function freeLoopbackPort(avoid: ReadonlySet<number> = new Set()): Promise<number> {
  const low = ephemeralLow();
  for (let attempt = 0; low - FLOOR >= 1000 && attempt < 50; attempt++) {
    const candidate = FLOOR + Math.floor(Math.random() * (low - FLOOR));
    if (avoid.has(candidate)) continue;
    const port = await bindable(candidate);
    if (port !== undefined) return port;
  }
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = await bindable(0);
    if (port !== undefined && !avoid.has(port)) return port;
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
