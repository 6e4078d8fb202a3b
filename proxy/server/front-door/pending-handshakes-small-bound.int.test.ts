/**
 * The bound on handshakes in progress at its smallest, against a real TLS gateway whose descriptor
 * limit is 1,024 (so, by default, 437 connections and 54 handshakes in progress: descriptor-budget.ts):
 * connections that each sent the start of a ClientHello and stall, as many as the bound, must not
 * turn every new connection away. The gateway closes one of them, not the connection just accepted (which has
 * sent nothing yet, so would be the "least advanced" of all).
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../../test/support/database.ts';
import type { GatewayProcess } from '../../../test/support/gateway.ts';
import { PARTIAL_CLIENT_HELLO, startTlsHandshakeGateway } from '../../../test/support/tls-handshake-gateway.ts';
import { defaultMaxConnections } from './descriptor-budget.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

const DESCRIPTOR_LIMIT = 1024;
const MAX_PENDING = defaultMaxPendingHandshakes(defaultMaxConnections(DESCRIPTOR_LIMIT, true));

const db = useTestDatabase();
let gw: GatewayProcess;
let healthStatus: () => Promise<number | string>;
const stalled = new Set<net.Socket>();

beforeAll(async () => {
  ({ gw, healthStatus } = await startTlsHandshakeGateway({
    databaseUrl: db.url,
    wrap: ['prlimit', `--nofile=${DESCRIPTOR_LIMIT}:${DESCRIPTOR_LIMIT}`, '--'],
  }));
});

afterAll(() => {
  for (const s of stalled) s.destroy();
});

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
    expect(MAX_PENDING).toBe(54);
    for (let i = 0; i < MAX_PENDING; i++) await stall();
    // Every one of them accepted and its bytes read by the gateway before the client comes.
    await sleep(500);
    expect(stalled.size).toBe(MAX_PENDING);
    const statuses: Array<number | string> = [];
    for (let i = 0; i < 3; i++) statuses.push(await healthStatus());
    expect(statuses).toEqual([200, 200, 200]);
  });
});
