/**
 * What the console's status view reads (I/O edge): the slot table from PostgreSQL with the ages
 * computed in database time, each advertised gateway's public `/health/status` (probed from the
 * writer, cached briefly), and the rate-limit block counters and slice cache figures of this
 * process's metrics registries.
 */
import type pg from 'pg';
import { register as defaultRegistry, type Registry } from 'prom-client';
import { METRIC_NAMES } from '../../policy/rate-limit/metrics.ts';

export interface SlotRow {
  slot: number;
  role: string;
  owner: string;
  generation: number;
  advertiseUrl: string | null;
  acquiredAt: string;
  renewedAt: string;
  /** Seconds since the lease was taken by its current owner. */
  heldSeconds: number;
  /** Seconds since the last confirmed renewal (the lease age; renewals come every ~2 s). */
  leaseAgeSeconds: number;
  /** Seconds until the reservation expires; negative once expired. */
  expiresInSeconds: number;
}

export async function readSlots(pool: pg.Pool): Promise<SlotRow[]> {
  const { rows } = await pool.query<{
    slot: number;
    role: string;
    owner: string;
    generation: string;
    advertise_url: string | null;
    acquired_at: Date;
    renewed_at: Date;
    held_s: number;
    age_s: number;
    left_s: number;
  }>(
    `SELECT slot, role, owner::text, generation::text, advertise_url, acquired_at, renewed_at,
            extract(epoch FROM clock_timestamp() - acquired_at)::float8 AS held_s,
            extract(epoch FROM clock_timestamp() - renewed_at)::float8 AS age_s,
            extract(epoch FROM expires_at - clock_timestamp())::float8 AS left_s
       FROM arkvory_gateway_leases ORDER BY slot`,
  );
  const round = (s: number) => Math.round(s * 10) / 10;
  return rows.map((r) => ({
    slot: r.slot,
    role: r.role,
    owner: r.owner,
    generation: Number(r.generation),
    advertiseUrl: r.advertise_url,
    acquiredAt: r.acquired_at.toISOString(),
    renewedAt: r.renewed_at.toISOString(),
    heldSeconds: round(r.held_s),
    leaseAgeSeconds: round(r.age_s),
    expiresInSeconds: round(r.left_s),
  }));
}

/** `serving`, another `/health/status` answer (`draining`, `fenced`…), or `unreachable`. */
export type ProbeResult = string;

/** Probes `<origin>/health/status` with a short timeout; answers are cached for `cacheMs`. */
export function createHealthProber(options: { timeoutMs: number; cacheMs: number; monotonicMs: () => number }) {
  const cache = new Map<string, { atMs: number; result: Promise<ProbeResult> }>();
  const probe = async (origin: string): Promise<ProbeResult> => {
    try {
      const res = await fetch(new URL('/health/status', origin), {
        signal: AbortSignal.timeout(options.timeoutMs),
        redirect: 'manual',
      });
      const body = (await res.json().catch(() => ({}))) as { status?: unknown };
      if (res.status === 200) return 'serving';
      return typeof body.status === 'string' && /^[a-z_]{1,32}$/.test(body.status)
        ? body.status
        : `status ${res.status}`;
    } catch {
      return 'unreachable';
    }
  };
  return (origin: string): Promise<ProbeResult> => {
    const now = options.monotonicMs();
    const hit = cache.get(origin);
    if (hit && now - hit.atMs < options.cacheMs) return hit.result;
    const result = probe(origin);
    cache.set(origin, { atMs: now, result });
    if (cache.size > 64) cache.delete(cache.keys().next().value!);
    return result;
  };
}

/** Requests refused by each limiter in this process (checks and peeks that blocked). */
export async function rateLimitBlocks(registry: Registry = defaultRegistry): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const name of [METRIC_NAMES.checks, METRIC_NAMES.peeks]) {
    const metric = registry.getSingleMetric(name);
    if (!metric) continue;
    const { values } = await metric.get();
    for (const v of values) {
      const limiter = String(v.labels.limiter ?? '');
      if (!limiter) continue;
      out[limiter] ??= 0;
      if (v.labels.action === 'block') out[limiter] += v.value;
    }
  }
  return out;
}

export interface SliceCacheView {
  requests: { hit: number; miss: number; bypass: number };
  /** Hits over hits and misses (requests), null before the first; bypassed blobs (no digests) not counted. */
  hitRatio: number | null;
  /** Bytes served from disk over bytes served, null before the first. */
  byteHitRatio: number | null;
  heldBytes: number;
  heldSlices: number;
  maxBytes: number;
}

/** The slice cache's figures from its metrics (slice-cache-metrics.ts), or null without a slice cache. */
export async function sliceCacheView(registry: Registry, maxBytes: number): Promise<SliceCacheView | null> {
  const values = async (name: string) => (await registry.getSingleMetric(name)?.get())?.values ?? [];
  const requests = await values('arkvory_slice_cache_requests_total');
  if (requests.length === 0) return null;
  const by = (vs: typeof requests, label: string, value: string) =>
    vs.find((v) => v.labels[label] === value)?.value ?? 0;
  const bytes = await values('arkvory_slice_cache_bytes_total');
  const hit = by(requests, 'result', 'hit');
  const miss = by(requests, 'result', 'miss');
  const hitBytes = by(bytes, 'source', 'hit');
  const missBytes = by(bytes, 'source', 'miss');
  return {
    requests: { hit, miss, bypass: by(requests, 'result', 'bypass') },
    hitRatio: hit + miss > 0 ? hit / (hit + miss) : null,
    byteHitRatio: hitBytes + missBytes > 0 ? hitBytes / (hitBytes + missBytes) : null,
    heldBytes: (await values('arkvory_slice_cache_held_bytes'))[0]?.value ?? 0,
    heldSlices: by(await values('arkvory_cache_entries'), 'cache', 'slice'),
    maxBytes,
  };
}
