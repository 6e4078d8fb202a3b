/**
 * A shared-profile cluster for lease scenarios: a database of its own, a writer on a direct link
 * holding one published file, and readers whose database link may run through a toxiproxy proxy.
 * `holdRenewals` puts a long latency on a reader's requests to PostgreSQL, so its lease row keeps
 * the last renewal that was confirmed and every later one waits in the proxy. A parked reader has
 * its database link disabled: it sits in the startup retry loop, already loaded, and reaches the
 * lease within one retry delay (≤ 5 s) of the link being enabled.
 */
import { afterAll, beforeAll, expect, inject } from 'vitest';
import { waitForHealth, waitUntil } from '../../test/harness/index.ts';
import { randomContent } from '../../test/support/content.ts';
import type { TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { chaosDatabase } from './chaos-database.ts';
import { call, msSinceRenewal, sharedEnv } from './gateways.ts';
import { addLatency, startToxiproxy, type ProxiedUpstream } from './toxiproxy.ts';

export interface SharedCluster {
  readonly db: TestDatabase;
  readonly writer: GatewayProcess;
  /** A key with write on repository `chaos`. */
  readonly key: string;
  readonly file: Buffer;
  readonly contentPath: string;
  /** Starts a reader on `slot`, its database URL through `link` when given. */
  startReader(
    slot: number,
    options?: {
      link?: ProxiedUpstream;
      env?: Record<string, string>;
      timeoutMs?: number;
      waitFor?: 'serving' | 'none';
    },
  ): Promise<GatewayProcess>;
  stop(): Promise<void>;
}

/**
 * Creates the database, starts the writer and, at the same time, the `parked` readers (their links
 * disabled, so they load and then retry the database at startup); uploads the file once the writer
 * serves. Loading processes in parallel matters on a loaded machine, where a start takes many seconds.
 */
export async function startSharedCluster(options: {
  slots: number;
  rateBytesPerSec: number;
  fileBytes: number;
  parked?: ReadonlyArray<{ slot: number; link: ProxiedUpstream; env?: Record<string, string> }>;
}): Promise<SharedCluster & { parked: GatewayProcess[] }> {
  const { db, key } = await chaosDatabase();
  const dataDir = await makeTempDir();
  const env = (databaseUrl: string, role: 'api' | 'reader', slot: number) =>
    sharedEnv({ databaseUrl, role, slot, slots: options.slots, rateBytesPerSec: options.rateBytesPerSec });
  const startReader: SharedCluster['startReader'] = (slot, readerOptions = {}) => {
    const url = readerOptions.link ? readerOptions.link.through(db.url) : db.url;
    return startGateway({
      env: { ...env(url, 'reader', slot), ...readerOptions.env },
      dataDir,
      timeoutMs: readerOptions.timeoutMs ?? 60_000,
      waitFor: readerOptions.waitFor ?? 'serving',
    });
  };
  for (const p of options.parked ?? []) await setEnabled(p.link, false);
  const [writer, ...parked] = await Promise.all([
    startGateway({ env: env(db.url, 'api', 0), dataDir, timeoutMs: 90_000 }),
    ...(options.parked ?? []).map((p) =>
      startReader(p.slot, { link: p.link, waitFor: 'none', ...(p.env ? { env: p.env } : {}) }),
    ),
  ]);
  await Promise.all(parked.map((reader) => waitParked(reader)));
  const file = randomContent(options.fileBytes);
  const put = await call(`${writer.url}/api/v1/repositories/chaos/artifacts/file.bin`, {
    method: 'PUT',
    key,
    headers: { 'content-type': 'application/octet-stream' },
    body: file,
  });
  expect(put.status).toBe(201);
  return {
    db,
    writer,
    key,
    file,
    contentPath: '/api/v1/repositories/chaos/artifacts/file.bin/content',
    startReader,
    parked,
    async stop() {
      await writer.stop();
      await db.drop();
    },
  };
}

/**
 * A shared cluster whose parked readers each reach PostgreSQL through a toxiproxy link of their own
 * (`links[i]` is `parked[i]`'s); `stop` ends the proxies, then the cluster.
 */
export async function startLinkedCluster(options: {
  slots: number;
  rateBytesPerSec: number;
  fileBytes: number;
  parked: ReadonlyArray<{ slot: number; env?: Record<string, string> }>;
}): Promise<SharedCluster & { parked: GatewayProcess[]; links: ProxiedUpstream[] }> {
  const toxiproxy = await startToxiproxy();
  try {
    const links: ProxiedUpstream[] = [];
    for (let i = 0; i < options.parked.length; i++) links.push(await toxiproxy.proxyToUrl(inject('adminDatabaseUrl')));
    const cluster = await startSharedCluster({
      ...options,
      parked: options.parked.map((p, i) => ({ ...p, link: links[i]! })),
    });
    return {
      ...cluster,
      links,
      async stop() {
        await toxiproxy.stop();
        await cluster.stop();
      },
    };
  } catch (err) {
    await toxiproxy.stop();
    throw err;
  }
}

export type LinkedCluster = SharedCluster & { parked: GatewayProcess[]; links: ProxiedUpstream[] };

/**
 * `startLinkedCluster` before the file's tests (180 s: the starts are slow on a loaded machine) and
 * stopped after them; the returned object's fields are there once the file's tests run.
 */
export function useLinkedCluster(options: Parameters<typeof startLinkedCluster>[0]): LinkedCluster {
  const cluster = {} as LinkedCluster;
  beforeAll(async () => {
    Object.assign(cluster, await startLinkedCluster(options));
  }, 180_000);
  afterAll(() => cluster.stop?.());
  return cluster;
}

/** Two readers parked on slot 1, each behind its own link: one that loses the slot and its successor. */
export const SLOT_SUCCESSION = { slots: 2, rateBytesPerSec: 2 * 1024 * 1024, parked: [{ slot: 1 }, { slot: 1 }] };

/** The readers of a SLOT_SUCCESSION cluster and their links. */
export function successionOf(cluster: LinkedCluster) {
  const [old, successor] = cluster.parked as [GatewayProcess, GatewayProcess];
  const [oldLink, successorLink] = cluster.links as [ProxiedUpstream, ProxiedUpstream];
  return { old, successor, oldLink, successorLink };
}

/** Far above the 8 s permit: no renewal sent under this latency can be confirmed in time. */
export const HOLD_LATENCY_MS = 30_000;

/**
 * Delays every request of the reader behind `link` by HOLD_LATENCY_MS and waits until a renewal of
 * `slot` is overdue (> 2.3 s since the last one reached the database), which proves the toxic holds
 * them. Returns the toxic (removing it lets the held requests through at once).
 */
export async function holdRenewals(
  cluster: SharedCluster,
  link: ProxiedUpstream,
  slot: number,
): Promise<{ remove(): Promise<void> }> {
  const toxic = await addLatency(link, { name: 'hold-requests', stream: 'upstream', latencyMs: HOLD_LATENCY_MS });
  await waitUntil(async () => (await msSinceRenewal(cluster.db.pool, slot)) > 2300, {
    timeoutMs: 5000,
    intervalMs: 50,
    what: 'a renewal to be overdue',
  });
  return toxic;
}

/** Enables or disables a proxy (disabled: connections are refused). */
export async function setEnabled(link: ProxiedUpstream, enabled: boolean): Promise<void> {
  await link.proxy.update({ enabled, listen: link.proxy.listen, upstream: link.proxy.upstream });
}

/** Waits until a reader whose link is disabled has loaded and retries the database at startup. */
export async function waitParked(reader: GatewayProcess): Promise<void> {
  await waitUntil(() => reader.logs().includes('PostgreSQL not reachable at startup; retrying'), {
    timeoutMs: 90_000,
    intervalMs: 50,
    what: 'the parked reader to retry the database',
    process: reader,
  });
}

/** Enables a parked reader's link and waits until it serves. */
export async function release(reader: GatewayProcess, link: ProxiedUpstream): Promise<void> {
  await setEnabled(link, true);
  await waitForHealth(reader, { timeoutMs: 60_000 });
}
