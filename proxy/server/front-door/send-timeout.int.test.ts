import net from 'node:net';
import tls from 'node:tls';
import { rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FrontDoorServer, startFrontDoorServer } from '../../../test/support/front-door-server.ts';
import { systemClock } from '../../../policy/clock.ts';
import { makeTempDir } from '../../../test/harness/temp-dir.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
} from '../../../test/harness/tls-certs.ts';
import { ServedTls } from '../../tls/served-tls.ts';
import { DEFAULT_FRONT_DOOR, type FrontDoor } from '../front-door.ts';

const SEND_IDLE_MS = 1000;
const LIMITS = { ...DEFAULT_FRONT_DOOR, sendIdleTimeoutMs: SEND_IDLE_MS, headersTimeoutMs: 2000 };
const log = pino({ level: 'silent' });
let dir: string;
let ca: CertificateAuthority;
const servers: FrontDoorServer[] = [];

/** A server whose every answer is an endless download, written as fast as the client takes it. */
async function start(served: ServedTls | undefined): Promise<FrontDoorServer> {
  const entry = await startFrontDoorServer({
    limits: LIMITS,
    tls: served,
    log,
    answer: (_req, res) => {
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
      };
      res.on('drain', pump);
      pump();
    },
  });
  servers.push(entry);
  return entry;
}

beforeAll(async () => {
  dir = await makeTempDir();
  ca = await createCertificateAuthority(dir);
});

afterAll(async () => {
  for (const entry of servers) await entry.close();
  await rm(dir, { recursive: true, force: true });
});

async function stalledDownload(connect: () => net.Socket, door: FrontDoor): Promise<number> {
  const socket = connect();
  let closed = false;
  socket.on('close', () => (closed = true));
  socket.write('GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
  // Takes the first bytes, then nothing more: the server's writes fill the socket buffers.
  await new Promise((resolve) => socket.once('data', resolve));
  socket.pause();
  const before = door.counters().timeouts.send;
  // A blank line every fifth of the send timeout, for up to 20 send timeouts.
  for (let i = 0; i < 100 && !closed; i++) {
    socket.write('\r\n');
    await sleep(SEND_IDLE_MS / 5);
  }
  socket.destroy();
  return door.counters().timeouts.send - before;
}

describe('the HTTP/1.1 send timeout', () => {
  it('cuts a download the client stops reading while it keeps sending blank lines', async () => {
    const { door, port } = await start(undefined);
    expect(await stalledDownload(() => net.connect(port, '127.0.0.1').on('error', () => {}), door)).toBe(1);
  }, 60_000);

  it('so too over TLS', async () => {
    const pair = await issueServerCertificate(ca, dir);
    const served = await ServedTls.open(
      { certFile: pair.certFile, keyFile: pair.keyFile, clientCaFile: undefined, clientCert: 'off' },
      { clock: systemClock, log },
    );
    const { door, port } = await start(served);
    const connect = () =>
      tls
        .connect({ host: '127.0.0.1', port, ca: ca.certPem, servername: 'localhost', ALPNProtocols: ['http/1.1'] })
        .on('error', () => {});
    expect(await stalledDownload(connect, door)).toBe(1);
  }, 60_000);
});
