/**
 * The connection bound and the drain on a TLS listener whose clients speak HTTP/2: a session is a
 * connection, so an idle one makes room as an idle HTTP/1.1 keep-alive connection does, and a
 * session that arrives while draining is told to go (GOAWAY) as an HTTP/1.1 connection is closed
 * after its answer. A real TLS listener on port 0 (proxy/server/listener.ts), node:http2 clients.
 */
import http2 from 'node:http2';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type FrontDoorServer,
  openTestCertificate,
  startFrontDoorServer,
  type TestCertificate,
} from '../../../test/support/front-door-server.ts';
import type { CertificateAuthority } from '../../../test/harness/tls-certs.ts';
import type { ServedTls } from '../../tls/served-tls.ts';
import { DEFAULT_FRONT_DOOR, type FrontDoor } from '../front-door.ts';

const MAX_CONNECTIONS = 3;
const log = pino({ level: 'silent' });
let certificate: TestCertificate;
let ca: CertificateAuthority;
let served: ServedTls;
let listening: FrontDoorServer;
let door: FrontDoor;
let origin: string;
const clients = new Set<http2.ClientHttp2Session>();
/** The GOAWAY code each client session received. */
const goaways = new Map<http2.ClientHttp2Session, number>();

beforeAll(async () => {
  certificate = await openTestCertificate(log);
  ({ ca, served } = certificate);
});

afterAll(async () => {
  await certificate.remove();
});

async function listen(
  limits: typeof DEFAULT_FRONT_DOOR = { ...DEFAULT_FRONT_DOOR, maxConnections: MAX_CONNECTIONS },
): Promise<void> {
  listening = await startFrontDoorServer({ limits, tls: served, log });
  door = listening.door;
  origin = `https://localhost:${listening.port}`;
}

afterEach(async () => {
  for (const c of clients) c.destroy();
  clients.clear();
  goaways.clear();
  await listening.close();
});

/** A new HTTP/2 connection, its handshake and SETTINGS done. */
async function connect(): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(origin, { ca: ca.certPem });
  clients.add(session);
  session.on('error', () => {});
  session.on('goaway', (code) => goaways.set(session, code));
  await new Promise<void>((resolve, reject) => {
    session.once('remoteSettings', () => resolve());
    session.once('error', reject);
  });
  return session;
}

function get(session: http2.ClientHttp2Session, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let status = 0;
    stream.on('response', (headers) => (status = Number(headers[':status'])));
    stream.on('error', reject);
    stream.resume();
    stream.on('close', () => (status ? resolve(status) : reject(new Error(`no answer (rst ${stream.rstCode})`))));
  });
}

describe('the connection bound counts HTTP/2 sessions', () => {
  it('sessions idle after a request make room for a new connection, as idle HTTP/1.1 ones do', async () => {
    await listen();
    for (let i = 0; i < MAX_CONNECTIONS; i++) expect(await get(await connect(), '/api/x')).toBe(200);
    const late = await connect();
    expect(await get(late, '/api/x')).toBe(200);
    expect(door.counters().refused).toBe(0);
  });

  it('sessions that never opened a stream make room for a new connection', async () => {
    await listen();
    for (let i = 0; i < MAX_CONNECTIONS; i++) await connect();
    const late = await connect();
    expect(await get(late, '/api/x')).toBe(200);
    expect(door.counters().refused).toBe(0);
  });
});

describe('the drain reaches HTTP/2 sessions', () => {
  /** Idle timeouts far past the test's deadline: only the drain may end a session here. */
  const LONG_IDLE = {
    ...DEFAULT_FRONT_DOOR,
    headersTimeoutMs: 600_000,
    keepAliveTimeoutMs: 600_000,
    maxConnections: 10,
  };

  /** The GOAWAY code `session` got before the server closed it, or `open` when it was not closed within 10 s. */
  function closedByServer(session: http2.ClientHttp2Session): Promise<number | 'open' | undefined> {
    return new Promise((resolve) => {
      const deadline = setTimeout(() => resolve('open'), 10_000);
      const done = () => {
        clearTimeout(deadline);
        resolve(goaways.get(session));
      };
      if (session.closed || session.destroyed) done();
      else session.once('close', done);
    });
  }

  it('a session open at the drain gets GOAWAY', async () => {
    await listen(LONG_IDLE);
    const session = await connect();
    expect(await get(session, '/api/x')).toBe(200);
    door.drain();
    expect(await closedByServer(session)).toBe(http2.constants.NGHTTP2_NO_ERROR);
  });

  it('a session that connects while draining is answered 503, then gets GOAWAY, as an HTTP/1.1 connection is closed', async () => {
    await listen(LONG_IDLE);
    door.drain();
    const session = await connect();
    expect(await get(session, '/api/x')).toBe(503);
    expect(await closedByServer(session)).toBe(http2.constants.NGHTTP2_NO_ERROR);
  }, 20_000);
});
