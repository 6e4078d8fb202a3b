/**
 * A listener with the gateway's front door and nothing behind it but a test's answer, on a free
 * loopback port: plain HTTP, or HTTPS with HTTP/2 when given a certificate. For tests of the front
 * door's own bounds and timeouts, without a gateway's routes and gates.
 */
import { rm } from 'node:fs/promises';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { type Logger, pino } from 'pino';
import { afterAll, afterEach, beforeAll } from 'vitest';
import {
  DEFAULT_FRONT_DOOR,
  type FrontDoor,
  type FrontDoorLimits,
  installFrontDoor,
  serverOptions,
} from '../../proxy/server/front-door.ts';
import { createListener } from '../../proxy/server/listener.ts';
import { ServedTls } from '../../proxy/tls/served-tls.ts';
import { systemClock } from '../../policy/clock.ts';
import { makeTempDir } from '../harness/temp-dir.ts';
import { type CertificateAuthority, createCertificateAuthority, issueServerCertificate } from '../harness/tls-certs.ts';

export interface FrontDoorServer {
  readonly server: Server;
  readonly door: FrontDoor;
  readonly port: number;
  /** Stops listening and cuts every connection still open. */
  close(): Promise<void>;
}

export async function startFrontDoorServer(
  options: {
    limits?: FrontDoorLimits;
    tls?: ServedTls | undefined;
    log?: Logger;
    /** What an admitted request is answered; default `ok`. */
    answer?: (req: IncomingMessage, res: ServerResponse) => void;
    /** Hears the code of each answer given before a request existed (installFrontDoor's `answeredEarly`). */
    answeredEarly?: (code: string) => void;
  } = {},
): Promise<FrontDoorServer> {
  const limits = options.limits ?? DEFAULT_FRONT_DOOR;
  const log = options.log ?? pino({ level: 'silent' });
  const answer = options.answer ?? ((_req, res) => res.end('ok'));
  const server = createListener({ http: serverOptions(limits), tls: options.tls, log });
  const door = installFrontDoor(
    server,
    limits,
    log,
    (req, res) => {
      if (door.admit(req, res)) answer(req, res);
    },
    options.answeredEarly,
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    server,
    door,
    port: (server.address() as AddressInfo).port,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

/** A server certificate of a fresh test CA, served as the listener would serve it; `remove()` deletes its files. */
export interface TestCertificate {
  readonly ca: CertificateAuthority;
  readonly served: ServedTls;
  remove(): Promise<void>;
}

export async function openTestCertificate(log: Logger = pino({ level: 'silent' })): Promise<TestCertificate> {
  const dir = await makeTempDir();
  const ca = await createCertificateAuthority(dir);
  const pair = await issueServerCertificate(ca, dir);
  const served = await ServedTls.open(
    { certFile: pair.certFile, keyFile: pair.keyFile, clientCaFile: undefined, clientCert: 'off' },
    { clock: systemClock, log },
  );
  return { ca, served, remove: () => rm(dir, { recursive: true, force: true }) };
}

/**
 * A TLS front-door listener per test and raw TLS clients of it, for tests that write HTTP/2 frame by
 * frame: one certificate for the file, the listener and its clients closed after each test.
 */
export function useRawTlsFrontDoor(log: Logger = pino({ level: 'silent' })) {
  let certificate: TestCertificate | undefined;
  let listening: FrontDoorServer | undefined;
  const sockets = new Set<tls.TLSSocket>();
  beforeAll(async () => {
    certificate = await openTestCertificate(log);
  });
  afterAll(async () => {
    await certificate?.remove();
  });
  afterEach(async () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
    await listening?.close();
    listening = undefined;
  });
  return {
    /** Starts this test's listener (at most 10 connections unless `limits` says otherwise). */
    async listen(
      limits: Partial<FrontDoorLimits>,
      answer: (req: IncomingMessage, res: ServerResponse) => void,
    ): Promise<FrontDoorServer> {
      listening = await startFrontDoorServer({
        limits: { ...DEFAULT_FRONT_DOOR, maxConnections: 10, ...limits },
        tls: certificate!.served,
        log,
        answer,
      });
      return listening;
    },
    /** A TLS connection to `port` offering only h2, handshake done; its errors are the test's to read. */
    async connect(port: number): Promise<tls.TLSSocket> {
      const socket = tls.connect({
        port,
        host: '127.0.0.1',
        ca: certificate!.ca.certPem,
        servername: 'localhost',
        ALPNProtocols: ['h2'],
      });
      sockets.add(socket);
      socket.on('error', () => {});
      await new Promise((resolve) => socket.once('secureConnect', resolve));
      return socket;
    },
  };
}
