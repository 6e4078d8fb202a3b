/**
 * The front door's bounds against the descriptor limit, on real gateways under `prlimit --nofile`.
 * With the default bounds, on a TLS gateway limited to 2,048 descriptors: one client holds stalled
 * uploads on every connection the bound serves but one (each a socket and a temporary file) and as
 * many stalled handshakes as their bound allows, and another client is still served a download,
 * with no descriptor error (EMFILE) and no warning in the gateway's log. A configured bound the
 * limit cannot hold refuses the start (exit 2), naming the variable and the numbers; with workers,
 * each worker's share of it is what must fit.
 */
import { readdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../../test/support/auth.ts';
import { randomContent, request } from '../../../test/support/content.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import { type GatewayProcess, problemLines, startGateway } from '../../../test/support/gateway.ts';
import { PARTIAL_CLIENT_HELLO, startTlsHandshakeGateway } from '../../../test/support/tls-handshake-gateway.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

const DESCRIPTORS = 2048;
const UPLOAD_BYTES = 1024 * 1024;

const db = useTestDatabase();
let gw: GatewayProcess;
let ca: string;
let flooder: { key: string };
let other: { key: string };
const small = randomContent(64 * 1024);
const held = new Set<net.Socket>();
/** Flood connections the gateway closed or reset (none should be: each is within a bound). */
let floodClosed = 0;

const base = () => `https://127.0.0.1:${gw.port}`;
const artifactPath = (id: string) => `/api/v1/repositories/fds/artifacts/${id}`;

beforeAll(async () => {
  await createRepository(db.pool, 'fds');
  flooder = await createServiceAccount(db.pool, { grants: { fds: 'write' } });
  other = await createServiceAccount(db.pool, { scopes: ['read'], grants: { fds: 'read' } });
  ({ gw, ca } = await startTlsHandshakeGateway({
    databaseUrl: db.url,
    env: {
      // One client may hold as many uploads as the connection bound serves; they stall for the
      // whole test.
      ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '1000',
      ARKVORY_BODY_TIMEOUT_SECONDS: '600',
    },
    wrap: ['prlimit', `--nofile=${DESCRIPTORS}:${DESCRIPTORS}`, '--'],
  }));
  const put = await request(`${base()}${artifactPath('small.bin')}`, {
    method: 'PUT',
    headers: bearer(flooder.key),
    body: small,
    ca,
  });
  expect([200, 201]).toContain(put.status);
}, 120_000);

afterAll(() => {
  for (const socket of held) socket.destroy();
});

async function metric(name: string): Promise<number> {
  const res = await request(`${base()}/metrics`, { ca });
  const match = new RegExp(`^${name} (\\d+)$`, 'm').exec(res.body.toString());
  if (!match) throw new Error(`no ${name} in /metrics`);
  return Number(match[1]);
}

const openDescriptors = async () => (await readdir(`/proc/${gw.child.pid}/fd`)).length;
const tmpFiles = async () => (await readdir(path.join(gw.dataDir, 'tmp')).catch(() => [])).length;

/** A TLS connection whose upload sends its head and a first KiB, then nothing. */
function stalledUpload(i: number): Promise<void> {
  return new Promise((resolve) => {
    const socket = tls.connect({ port: gw.port, host: '127.0.0.1', ca });
    held.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => {
      floodClosed++;
      held.delete(socket);
      resolve();
    });
    socket.once('secureConnect', () =>
      socket.write(
        `PUT ${artifactPath(`flood-${i}.bin`)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${flooder.key}\r\nContent-Length: ${UPLOAD_BYTES}\r\n\r\n${'x'.repeat(1024)}`,
        () => resolve(),
      ),
    );
  });
}

/** A TCP connection that sends the start of a ClientHello, then nothing. */
function stalledHandshake(): Promise<void> {
  return new Promise((resolve) => {
    const socket = net.connect(gw.port, '127.0.0.1');
    held.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => {
      held.delete(socket);
      resolve();
    });
    socket.once('connect', () => socket.write(PARTIAL_CLIENT_HELLO, () => resolve()));
  });
}

describe('the front door within the descriptor limit', () => {
  it('with the default bounds, connections and handshakes up to them leave another client served', async () => {
    expect(await readFile(`/proc/${gw.child.pid}/limits`, 'utf8')).toMatch(
      new RegExp(`Max open files\\s+${DESCRIPTORS}\\s+${DESCRIPTORS}`),
    );
    const bound = await metric('arkvory_http_max_connections');
    const uploads = bound - 1;
    for (let i = 0; i < uploads; i += 50) {
      const batch: Array<Promise<void>> = [];
      for (let j = i; j < Math.min(uploads, i + 50); j++) batch.push(stalledUpload(j));
      await Promise.all(batch);
    }
    // Every upload admitted: its temporary file open beside its socket (or its connection closed).
    await waitUntil(async () => (await tmpFiles()) + floodClosed >= uploads, {
      what: 'every stalled upload to hold its temporary file',
      timeoutMs: 60_000,
      process: gw,
    });
    const beforeHandshakes = await openDescriptors();
    const pending = defaultMaxPendingHandshakes(bound);
    for (let i = 0; i < pending; i += 50) {
      const batch: Array<Promise<void>> = [];
      for (let j = i; j < Math.min(pending, i + 50); j++) batch.push(stalledHandshake());
      await Promise.all(batch);
    }
    // The gateway accepted them all (each holds a descriptor), or could not.
    await waitUntil(async () => (await openDescriptors()) >= beforeHandshakes + pending, {
      what: 'the stalled handshakes to be accepted',
      timeoutMs: 10_000,
      process: gw,
    }).catch(() => {});
    await sleep(200);

    const download = await request(`${base()}${artifactPath('small.bin')}/content`, {
      headers: bearer(other.key),
      ca,
    });
    expect(download.status).toBe(200);
    expect(download.body.equals(small)).toBe(true);
    expect(floodClosed).toBe(0);
    expect(await tmpFiles()).toBe(uploads);
    expect(await openDescriptors()).toBeLessThan(DESCRIPTORS);
    expect(problemLines(gw.logLines())).toEqual([]);
    // The start said what it chose, and /metrics shows both bounds.
    expect(gw.logLines().find((l) => l.maxPendingHandshakes !== undefined)).toMatchObject({
      level: 'info',
      maxConnections: bound,
      maxPendingHandshakes: pending,
      descriptorLimit: DESCRIPTORS,
    });
    expect(await metric('arkvory_http_max_pending_handshakes')).toBe(pending);
  }, 180_000);

  it('a configured bound the limit cannot hold refuses the start (exit 2), naming the numbers', async () => {
    const refused = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker', ARKVORY_MAX_CONNECTIONS: '1000' },
      wrap: ['prlimit', '--nofile=1024:1024', '--'],
      waitFor: 'none',
    });
    // A gateway that started anyway is stopped when the file ends (test/support/gateway.ts).
    const code = await Promise.race([refused.exited, sleep(30_000).then(() => 'still running')]);
    expect(code).toBe(2);
    expect(refused.stderr().trim().split('\n')).toEqual([
      "arkvory: cannot start: ARKVORY_MAX_CONNECTIONS=1000 cannot be honoured: it needs 2 × 1000 connections + 32 refusals answered + 64 for the gateway's own = 2096 descriptors, above the descriptor limit of 1024 (ulimit -n, systemd LimitNOFILE); set it to at most 464 or raise the limit",
    ]);
  });

  it("an instance of workers (a router's here): each worker's share is judged against the limit it inherits", async () => {
    const refused = await startGateway({
      env: {
        ARKVORY_ROLE: 'router',
        ARKVORY_ROUTER_BACKENDS: 'http://127.0.0.1:9',
        ARKVORY_WORKERS: '2',
        ARKVORY_MAX_CONNECTIONS: '1000',
      },
      wrap: ['prlimit', '--nofile=1024:1024', '--'],
      waitFor: 'none',
    });
    const code = await Promise.race([refused.exited, sleep(30_000).then(() => 'still running')]);
    expect(code).toBe(2);
    expect(refused.stderr()).toContain(
      "ARKVORY_MAX_CONNECTIONS=1000 cannot be honoured: it needs 2 × 500 connections + 32 refusals answered + 64 for the gateway's own = 1096 descriptors per worker of 2, above the descriptor limit of 1024 (ulimit -n, systemd LimitNOFILE); set it to at most 928 or raise the limit",
    );
  });
});
