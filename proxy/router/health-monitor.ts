/**
 * Keeps the pool current: every probe interval it re-reads discovery and probes each gateway's
 * public `/health/status` (200 = in the pool). A probe has 0.9 interval for everything (connect,
 * head, body): a gateway that dies or hangs right after a passing probe is out of the pool within 2
 * intervals, and one whose host drops connection attempts, or that trickles its answer, cannot hold
 * up a round (which waits for every probe), the other gateways' probes, discovery, startup or stop.
 * It returns with its first passing probe. The answer's `store.state` (the gateway's own store health, with its
 * hysteresis: proxy/store-health/store-health.ts) is recorded too: `unreachable` takes the gateway
 * out of reads, anything else puts it back. A failed discovery keeps the last known list (the cache).
 */
import type { Agent } from 'node:http';
import http from '../../lib/node-http.ts';
import https from 'node:https';
import type { Logger } from 'pino';
import type { BackendPool, BackendStoreState, PoolChange } from './backend-pool.ts';
import type { Discovery } from './discovery.ts';

/** The most of a `/health/status` body read (a gateway's is under 200 bytes). */
const STATUS_BODY_LIMIT = 4096;

/** `store.state` of a gateway's `/health/status` body; `unknown` when absent (an older gateway, a stand-in). */
export function storeStateOf(body: string): BackendStoreState {
  try {
    const state = (JSON.parse(body) as { store?: { state?: unknown } }).store?.state;
    return state === 'ok' || state === 'degraded' || state === 'unreachable' ? state : 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * A keep-alive socket the gateway closed just as the probe reused it fails with one of these before
 * any answer. That race says nothing about the gateway, so such a probe is sent once more on a new
 * connection (what Node's documentation advises for `reusedSocket`); on a new connection they count.
 */
const STALE_SOCKET_CODES = new Set(['ECONNRESET', 'EPIPE']);

export type ProbeResult = { ok: boolean; reason: string; store: BackendStoreState };

export async function probeBackend(
  url: string,
  timeoutMs: number,
  agents: { http: Agent; https: https.Agent },
  signal?: AbortSignal,
): Promise<ProbeResult> {
  // One deadline for the probe, its one more try included.
  const deadline = performance.now() + timeoutMs;
  const first = await probeOnce(url, timeoutMs, timeoutMs, agents, signal);
  if (!first.staleSocket) return first.result;
  return (await probeOnce(url, Math.max(1, deadline - performance.now()), timeoutMs, agents, signal)).result;
}

function probeOnce(
  url: string,
  leftMs: number,
  timeoutMs: number,
  agents: { http: Agent; https: https.Agent },
  signal: AbortSignal | undefined,
): Promise<{ result: ProbeResult; staleSocket: boolean }> {
  return new Promise((resolve) => {
    const isHttps = url.startsWith('https:');
    const client = isHttps ? https : http;
    let settled = false;
    const done = (result: ProbeResult, staleSocket = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', stop);
      resolve({ result, staleSocket });
    };
    let answered = false;
    const req = client.request(
      `${url}/health/status`,
      { method: 'GET', agent: isHttps ? agents.https : agents.http, headers: { 'user-agent': 'arkvory-router-probe' } },
      (res) => {
        answered = true;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (body.length < STATUS_BODY_LIMIT) body += chunk;
        });
        res.on('end', () =>
          done(
            res.statusCode === 200
              ? { ok: true, reason: 'probe passed', store: storeStateOf(body) }
              : { ok: false, reason: `/health/status answered ${res.statusCode}`, store: 'unknown' },
          ),
        );
        res.on('error', (err) => done({ ok: false, reason: err.message, store: 'unknown' }));
        // Whatever ends the answer without 'end' or 'error' still settles the probe.
        res.on('close', () => done({ ok: false, reason: 'the probe answer was cut', store: 'unknown' }));
      },
    );
    // Not req.setTimeout: that one starts once a socket is connected and restarts at every byte, so
    // a host that drops SYNs (the kernel's ~2 min connect) or a trickled body would hold the probe.
    const fail = (reason: string) => {
      done({ ok: false, reason, store: 'unknown' });
      req.destroy(new Error(reason));
    };
    const timer = setTimeout(() => fail(`no answer to the probe within ${timeoutMs} ms`), leftMs);
    const stop = () => fail('the router is stopping');
    if (signal?.aborted) stop();
    else signal?.addEventListener('abort', stop, { once: true });
    req.on('error', (err: NodeJS.ErrnoException) =>
      done(
        { ok: false, reason: err.message, store: 'unknown' },
        !answered && req.reusedSocket && STALE_SOCKET_CODES.has(err.code ?? ''),
      ),
    );
    req.end();
  });
}

export interface HealthMonitor {
  /** One discovery + probe round; resolves when every probe finished (each within its deadline). */
  runRound(): Promise<void>;
  start(): void;
  stop(): Promise<void>;
}

export function createHealthMonitor(options: {
  pool: BackendPool;
  discovery: Discovery;
  intervalMs: number;
  log: Logger;
  onChange?: (change: PoolChange) => void;
}): HealthMonitor {
  const { pool, discovery, intervalMs, log } = options;
  const agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: 2 }),
    https: new https.Agent({ keepAlive: true, maxSockets: 2 }),
  };
  const probeTimeoutMs = Math.max(50, Math.floor(intervalMs * 0.9));
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let current: Promise<void> | undefined;
  let discoveryFailing = false;
  // Ends the probes in flight when the router stops.
  const halt = new AbortController();

  const report = (change: PoolChange | undefined) => {
    if (!change) return;
    if (change.healthy) log.info({ backend: change.url }, 'gateway joined the pool');
    else log.warn({ backend: change.url, reason: change.reason }, 'gateway left the pool');
    options.onChange?.(change);
  };

  const probe = async (url: string) => {
    const result = await probeBackend(url, probeTimeoutMs, agents, halt.signal);
    if (stopped) return;
    report(pool.recordProbe(url, result.ok, result.reason));
    if (!result.ok) return;
    const previous = pool.recordStore(url, result.store);
    if (previous === undefined) return;
    if (result.store === 'unreachable')
      log.warn({ backend: url }, "gateway's store unreachable: no reads to it until its store answers again");
    else if (previous === 'unreachable')
      log.info({ backend: url, store: result.store }, "gateway's store is back: reads again");
  };

  const runRound = async () => {
    const known = pool.urls();
    const probes = known.map(probe);
    try {
      const { added, removed } = pool.update(await discovery.discover());
      if (discoveryFailing) log.info('gateway discovery works again');
      discoveryFailing = false;
      for (const url of removed) log.info({ backend: url }, 'gateway no longer discovered (lease expired or removed)');
      probes.push(...added.map(probe));
    } catch (err) {
      if (!discoveryFailing)
        log.warn({ err: (err as Error).message }, 'gateway discovery failed; keeping the last known gateways');
      discoveryFailing = true;
    }
    await Promise.all(probes);
  };

  const loop = () => {
    if (stopped) return;
    const startedAt = performance.now();
    current = runRound().finally(() => {
      if (stopped) return;
      timer = setTimeout(loop, Math.max(0, intervalMs - (performance.now() - startedAt)));
    });
  };

  return {
    runRound,
    start() {
      timer = setTimeout(loop, intervalMs);
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      halt.abort();
      await current?.catch(() => {});
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
