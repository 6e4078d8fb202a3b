/**
 * A flood of TCP connections that never finish (or never start) a TLS handshake, against a real
 * TLS gateway: the handshakes in progress stay within their bound (the flood's oldest sockets are
 * closed by the gateway at once, not after the 30 s handshake timeout) and a well-behaved HTTPS
 * client is served throughout, also while the flood keeps coming.
 */
import { readdir, readlink } from 'node:fs/promises';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../../test/harness/index.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import type { GatewayProcess } from '../../../test/support/gateway.ts';
import { PARTIAL_CLIENT_HELLO, startTlsHandshakeGateway } from '../../../test/support/tls-handshake-gateway.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

/**
 * A bound of 512 handshakes in progress (an eighth). Against a flood of R new sockets a second, a
 * client is served if its handshake takes less than bound / R (here 256 ms at 2,000 a second).
 */
const MAX_CONNECTIONS = 4096;
const MAX_PENDING = defaultMaxPendingHandshakes(MAX_CONNECTIONS);

const db = useTestDatabase();
let gw: GatewayProcess;
let healthStatus: () => Promise<number | string>;

beforeAll(async () => {
  ({ gw, healthStatus } = await startTlsHandshakeGateway({
    databaseUrl: db.url,
    env: { ARKVORY_MAX_CONNECTIONS: String(MAX_CONNECTIONS) },
  }));
});

/** Raw TCP connections that never complete a handshake; `open()` counts those the gateway has not closed. */
class Flood {
  readonly #sockets = new Set<net.Socket>();
  opened = 0;

  /** `count` sockets, in batches of 100 that the gateway accepts before the next (the kernel's accept queue holds 511). */
  async add(count: number): Promise<void> {
    for (let left = count; left > 0; left -= 100) {
      await this.#batch(Math.min(100, left));
      if (left > 100) await sleep(10);
    }
  }

  async #batch(count: number): Promise<void> {
    const connected: Array<Promise<void>> = [];
    for (let i = 0; i < count; i++) {
      const socket = net.connect(gw.port, '127.0.0.1');
      this.opened++;
      this.#sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => this.#sockets.delete(socket));
      // Half of them send the start of a ClientHello, half send nothing at all.
      connected.push(
        new Promise((resolve) =>
          socket.once('connect', () => {
            if (i % 2 === 0) socket.write(PARTIAL_CLIENT_HELLO);
            resolve();
          }),
        ),
      );
    }
    await Promise.all(connected);
  }

  open(): number {
    return this.#sockets.size;
  }

  destroy(): void {
    for (const s of this.#sockets) s.destroy();
  }
}

/** The gateway's open sockets, as its kernel sees them (/proc/<pid>/fd): whatever it accepted and did not close. */
async function gatewaySockets(): Promise<number> {
  const fdDir = `/proc/${gw.child.pid}/fd`;
  let count = 0;
  for (const fd of await readdir(fdDir))
    if ((await readlink(`${fdDir}/${fd}`).catch(() => '')).startsWith('socket:')) count++;
  return count;
}

describe('TLS handshakes in progress are bounded', () => {
  it('a burst of 2,000 never-finished handshakes: at most the bound stay open, at once, and a real client is served', async () => {
    const flood = new Flood();
    const idleSockets = await gatewaySockets();
    try {
      await flood.add(2000);
      // Closed by the gateway as newer ones arrived, not by the 30 s handshake timeout.
      await waitUntil(async () => flood.open() <= MAX_PENDING, {
        what: `at most ${MAX_PENDING} flood sockets open (now ${flood.open()})`,
        timeoutMs: 3000,
      });
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push(await healthStatus());
      expect(statuses).toEqual([200, 200, 200, 200, 200]);
      // The client's handshakes made room by closing flood sockets: still within the bound, on both ends.
      expect(flood.open()).toBeLessThanOrEqual(MAX_PENDING);
      expect(await gatewaySockets()).toBeLessThanOrEqual(idleSockets + MAX_PENDING);
    } finally {
      flood.destroy();
    }
  });

  it('a flood that keeps coming (100 new sockets every 50 ms for 3 s): every client request is served, the open ones stay bounded', async () => {
    const flood = new Flood();
    const idleSockets = await gatewaySockets();
    let flooding = true;
    let worstGatewaySockets = 0;
    const floodLoop = (async () => {
      while (flooding) {
        await flood.add(100);
        await sleep(50);
        worstGatewaySockets = Math.max(worstGatewaySockets, (await gatewaySockets()) - idleSockets);
      }
    })();
    try {
      const started = Date.now();
      const statuses: Array<number | string> = [];
      // At least 3 s and at least 1,200 flood sockets (a loaded machine opens them slower), at most 30 s.
      while ((Date.now() - started < 3000 || flood.opened < 1200) && Date.now() - started < 30_000)
        statuses.push(await healthStatus());
      expect(statuses.length).toBeGreaterThan(5);
      expect(statuses.filter((s) => s !== 200)).toEqual([]);
    } finally {
      flooding = false;
      await floodLoop;
      flood.destroy();
    }
    expect(flood.opened).toBeGreaterThan(1000);
    // The handshakes in progress, and the client's one connection at a time.
    expect(worstGatewaySockets).toBeLessThanOrEqual(MAX_PENDING + 1);
  });
});
