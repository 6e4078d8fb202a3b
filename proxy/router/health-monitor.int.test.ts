/**
 * The router's probe over real sockets against a peer that resets connections: a keep-alive socket
 * closed just as the probe reuses it is not a gateway leaving the pool (the probe asks once more on
 * a new connection), while a reset on a new connection is. And against peers that never finish: a
 * listener that never accepts (its host drops the SYNs) and a 200 whose body trickles forever fail
 * their probe at its deadline, without holding up the round, a live gateway's probe, or stop().
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Worker } from 'node:worker_threads';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { answerHealthProbe } from '../../test/support/health-probe.ts';
import { BackendPool } from './backend-pool.ts';
import { staticDiscovery } from './discovery.ts';
import { createHealthMonitor, probeBackend } from './health-monitor.ts';

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

/**
 * A listening socket nobody accepts from, on 127.0.0.1: it listens in a worker thread that then blocks
 * (Atomics.wait), so its accept queue (backlog 1) fills with the connections made here; past that
 * the kernel drops the SYNs, as a host that black-holes them does, and a connect waits ~2 min.
 */
async function unacceptingListener(): Promise<{ url: string; close: () => Promise<void> }> {
  const worker = new Worker(
    `const net = require('node:net');
     const { parentPort } = require('node:worker_threads');
     const server = net.createServer();
     server.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
       parentPort.postMessage(server.address().port);
       Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
     });`,
    { eval: true },
  );
  const port = await new Promise<number>((resolve) => worker.once('message', resolve));
  const fillers: net.Socket[] = [];
  for (;;) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    fillers.push(socket);
    const connected = await new Promise<boolean>((resolve) => {
      socket.once('connect', () => resolve(true));
      setTimeout(() => resolve(false), 300);
    });
    if (!connected) break;
    if (fillers.length > 20) throw new Error('the accept queue never filled');
  }
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of fillers) socket.destroy();
      await worker.terminate();
    },
  };
}

/** A server whose `/health/status` is 200 with a body that never ends (a byte every 50 ms). */
async function tricklingPeer(): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const timer = setInterval(() => res.write(' '), 50);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function livePeer(): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    if (!answerHealthProbe(req, res)) res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  let closed = false;
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () =>
      closed
        ? Promise.resolve()
        : new Promise((resolve) => {
            closed = true;
            server.closeAllConnections();
            server.close(() => resolve());
          }),
  };
}

describe('probe deadline', () => {
  it('a host that never accepts the connection: the probe fails at its deadline, not at the kernel connect timeout', async () => {
    const peer = await unacceptingListener();
    cleanups.push(peer.close);
    const startedAt = performance.now();
    const result = await probeBackend(peer.url, 300, agents());
    expect(result).toEqual({ ok: false, reason: 'no answer to the probe within 300 ms', store: 'unknown' });
    expect(performance.now() - startedAt).toBeLessThan(800);
  });

  it('a 200 whose body trickles forever: the probe fails at its deadline', async () => {
    const peer = await tricklingPeer();
    cleanups.push(peer.close);
    const startedAt = performance.now();
    const result = await probeBackend(peer.url, 300, agents());
    expect(result).toMatchObject({ ok: false, reason: 'no answer to the probe within 300 ms' });
    expect(performance.now() - startedAt).toBeLessThan(800);
  });

  it('gateways that never answer hold up neither the round, nor a live gateway leaving the pool, nor stop()', async () => {
    const INTERVAL_MS = 400;
    const [live, unaccepting, trickling] = await Promise.all([livePeer(), unacceptingListener(), tricklingPeer()]);
    cleanups.push(live.close, unaccepting.close, trickling.close);
    const pool = new BackendPool();
    const discovery = staticDiscovery([live.url, unaccepting.url, trickling.url]);
    pool.update(await discovery.discover());
    const monitor = createHealthMonitor({ pool, discovery, intervalMs: INTERVAL_MS, log: pino({ level: 'silent' }) });
    let stopped = false;
    cleanups.push(() => (stopped ? undefined : monitor.stop()));
    const healthy = () => new Map(pool.snapshot().map((b) => [b.url, b.healthy]));

    // The round (what startup waits for before listening) ends at the probe deadline (0.9 interval).
    const roundAt = performance.now();
    await monitor.runRound();
    expect(performance.now() - roundAt).toBeLessThan(INTERVAL_MS + 200);
    expect(healthy()).toEqual(
      new Map([
        [live.url, true],
        [unaccepting.url, false],
        [trickling.url, false],
      ]),
    );

    monitor.start();
    await new Promise((resolve) => setTimeout(resolve, 2 * INTERVAL_MS));
    await live.close();
    const diedAt = performance.now();
    while (healthy().get(live.url) && performance.now() - diedAt < 10_000)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(healthy().get(live.url)).toBe(false);
    expect(performance.now() - diedAt).toBeLessThanOrEqual(2 * INTERVAL_MS + 100);

    // Stopping ends the probes in flight instead of waiting for them.
    const stopAt = performance.now();
    stopped = true;
    await monitor.stop();
    expect(performance.now() - stopAt).toBeLessThan(100);
  });
});
