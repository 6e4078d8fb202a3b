/**
 * A flood of TCP connections that never finish (or never start) a TLS handshake, against a real
 * TLS gateway: the handshakes in progress stay within their bound (the flood's oldest sockets are
 * closed by the gateway at once, not after the 30 s handshake timeout) and a well-behaved HTTPS
 * client is served throughout, also while the flood keeps coming.
 */
import { readdir, readlink } from 'node:fs/promises';
import https from 'node:https';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../../test/harness/index.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../../test/support/gateway.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

/**
 * A bound of 512 handshakes in progress (an eighth). Against a flood of R new sockets a second, a
 * client is served if its handshake takes less than bound / R (here 256 ms at 2,000 a second).
 */
const MAX_CONNECTIONS = 4096;
const MAX_PENDING = defaultMaxPendingHandshakes(MAX_CONNECTIONS);
/** The first bytes of a TLS record carrying a ClientHello, and nothing more: a handshake begun, never finished. */
const PARTIAL_CLIENT_HELLO = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);

const db = useTestDatabase();
let ca: CertificateAuthority;
let gw: GatewayProcess;

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-handshake-flood-');
  ca = await createCertificateAuthority(dir);
  const certificate = await issueServerCertificate(ca, dir);
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: certificate.certFile,
      ARKVORY_TLS_KEY_FILE: certificate.keyFile,
      ARKVORY_MAX_CONNECTIONS: String(MAX_CONNECTIONS),
    },
    waitFor: 'none',
  });
  await waitUntil(async () => (await healthStatus()) === 200, {
    what: 'the TLS gateway to serve',
    timeoutMs: 30_000,
    process: gw,
  });
});

/** One HTTPS request on a new connection (a new handshake); its status, or the error's code. */
function healthStatus(): Promise<number | string> {
  return new Promise((resolve) => {
    const req = https.get(
      `https://127.0.0.1:${gw.port}/health/status`,
      { ca: ca.certPem, agent: false, timeout: 5000 },
      (res) => res.resume().on('end', () => resolve(res.statusCode ?? 0)),
    );
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

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
