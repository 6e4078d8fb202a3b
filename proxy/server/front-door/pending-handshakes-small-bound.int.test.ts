/**
 * The bound on handshakes in progress at its smallest, against a real TLS gateway whose descriptor
 * limit is 1,024 (so, by default, 464 connections and 58 handshakes in progress): connections that
 * each sent the start of a ClientHello and stall, as many as the bound, must not turn every new
 * connection away. The gateway closes one of them, not the connection just accepted (which has
 * sent nothing yet, so would be the "least advanced" of all).
 */
import https from 'node:https';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../../test/harness/index.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../../test/support/gateway.ts';
import { defaultMaxConnections } from './connection-bound.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

const DESCRIPTOR_LIMIT = 1024;
const MAX_PENDING = defaultMaxPendingHandshakes(defaultMaxConnections(DESCRIPTOR_LIMIT));
/** The first bytes of a TLS record carrying a ClientHello, and nothing more: a handshake begun, never finished. */
const PARTIAL_CLIENT_HELLO = Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);

const db = useTestDatabase();
let ca: CertificateAuthority;
let gw: GatewayProcess;
const stalled = new Set<net.Socket>();

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-handshake-small-');
  ca = await createCertificateAuthority(dir);
  const certificate = await issueServerCertificate(ca, dir);
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: certificate.certFile,
      ARKVORY_TLS_KEY_FILE: certificate.keyFile,
    },
    wrap: ['prlimit', `--nofile=${DESCRIPTOR_LIMIT}:${DESCRIPTOR_LIMIT}`, '--'],
    waitFor: 'none',
  });
  await waitUntil(async () => (await healthStatus()) === 200, {
    what: 'the TLS gateway to serve',
    timeoutMs: 30_000,
    process: gw,
  });
});

afterAll(() => {
  for (const s of stalled) s.destroy();
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

/** A connection that sends the start of a ClientHello and then nothing. */
function stall(): Promise<void> {
  return new Promise((resolve) => {
    const socket = net.connect(gw.port, '127.0.0.1');
    stalled.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => stalled.delete(socket));
    socket.once('connect', () => socket.write(PARTIAL_CLIENT_HELLO, () => resolve()));
  });
}

describe('TLS handshakes in progress, at a small bound', () => {
  it('as many stalled handshakes as the bound do not turn away the next client', async () => {
    expect(MAX_PENDING).toBe(58);
    for (let i = 0; i < MAX_PENDING; i++) await stall();
    // Every one of them accepted and its bytes read by the gateway before the client comes.
    await sleep(500);
    expect(stalled.size).toBe(MAX_PENDING);
    const statuses: Array<number | string> = [];
    for (let i = 0; i < 3; i++) statuses.push(await healthStatus());
    expect(statuses).toEqual([200, 200, 200]);
  });
});
