/**
 * The router's probe over real sockets against a peer that resets connections: a keep-alive socket
 * closed just as the probe reuses it is not a gateway leaving the pool (the probe asks once more on
 * a new connection), while a reset on a new connection is.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { probeBackend } from './health-monitor.ts';

const STATUS = '{"status":"ok","store":{"state":"ok"}}';

/**
 * A peer speaking just enough HTTP/1.1 to answer a `/health/status` with 200 (kept alive) or to reset
 * the socket (RST) when a request arrives, as `answers(connection, request)` says (both from 1).
 */
async function resettingPeer(
  answers: (connection: number, request: number) => boolean,
): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    const connection = ++connections;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let requests = 0;
    socket.on('data', (chunk) => {
      if (!chunk.includes('\r\n\r\n')) return;
      if (!answers(connection, ++requests)) {
        socket.resetAndDestroy();
        return;
      }
      socket.write(
        `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${STATUS.length}\r\nconnection: keep-alive\r\n\r\n${STATUS}`,
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function agents() {
  const pair = {
    http: new http.Agent({ keepAlive: true, maxSockets: 2 }),
    https: new https.Agent({ keepAlive: true }),
  };
  cleanups.push(() => {
    pair.http.destroy();
    pair.https.destroy();
  });
  return pair;
}

describe('probeBackend', () => {
  it('a kept-alive socket reset as the probe reuses it: asked again on a new connection, the gateway stays in', async () => {
    const peer = await resettingPeer((_, request) => request === 1);
    cleanups.push(peer.close);
    const pair = agents();
    expect(await probeBackend(peer.url, 2000, pair)).toEqual({ ok: true, reason: 'probe passed', store: 'ok' });
    expect(peer.connections()).toBe(1);
    // The second probe goes out on the kept-alive socket, which the peer resets.
    expect(await probeBackend(peer.url, 2000, pair)).toEqual({ ok: true, reason: 'probe passed', store: 'ok' });
    expect(peer.connections()).toBe(2);
  });

  it('a reset on a new connection fails the probe, without a second attempt', async () => {
    const peer = await resettingPeer(() => false);
    cleanups.push(peer.close);
    const result = await probeBackend(peer.url, 2000, agents());
    expect(result).toMatchObject({ ok: false, store: 'unknown' });
    expect(result.reason).toMatch(/ECONNRESET|socket hang up/);
    expect(peer.connections()).toBe(1);
  });

  it('a reused socket reset and the new connection reset too: the probe fails after that one more try', async () => {
    const peer = await resettingPeer((connection, request) => connection === 1 && request === 1);
    cleanups.push(peer.close);
    const pair = agents();
    expect((await probeBackend(peer.url, 2000, pair)).ok).toBe(true);
    const result = await probeBackend(peer.url, 2000, pair);
    expect(result).toMatchObject({ ok: false, store: 'unknown' });
    expect(result.reason).toMatch(/ECONNRESET|socket hang up/);
    expect(peer.connections()).toBe(2);
  });
});
