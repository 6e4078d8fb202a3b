/**
 * The router's discovery cache: the known gateways, whether their last probe passed, and how many
 * proxied requests each is serving. No I/O and no clock: discovery and probes report into it, the
 * proxy asks it for a target.
 *
 * Selection (documented in docs/router.md): content reads go to the healthy gateway with the
 * fewest requests in flight through this router (least active); ties rotate round-robin, so an
 * idle pool is visited in turn. A gateway whose store is unreachable (its `/health/status` says so)
 * or that outlier detection ejected takes no reads, unless no gateway is left that could: then
 * reads go to every healthy gateway as before, which answer for themselves (503
 * `store_unreachable`), so the router never refuses reads it might have served. Everything else goes
 * to the writer, whatever its store's state (it answers 503 `store_unreachable` itself).
 */
import { type Ejection, OutlierDetector, type OutlierOptions } from './outlier-detector.ts';
import type { RequestClass } from './route-class.ts';

export type BackendRole = 'writer' | 'reader';
/** A gateway's store as its `/health/status` reports it; `unknown` for a gateway that does not say. */
export type BackendStoreState = 'ok' | 'degraded' | 'unreachable' | 'unknown';

export interface BackendSpec {
  /** Origin such as `http://10.0.0.5:8080` (no path). */
  readonly url: string;
  readonly role: BackendRole;
}

export interface BackendView {
  readonly url: string;
  readonly role: BackendRole;
  readonly healthy: boolean;
  readonly active: number;
  readonly store: BackendStoreState;
}

interface Backend {
  url: string;
  role: BackendRole;
  healthy: boolean;
  active: number;
  store: BackendStoreState;
  /** Position in discovery order, for a stable round-robin. */
  order: number;
  lastError: string | undefined;
}

/**
 * Least active first; among equals the first at or after `cursor` in rotation order. Returns the
 * index into `candidates`, or -1 when there is none.
 */
export function pickLeastActive(candidates: readonly Pick<BackendView, 'active'>[], cursor: number): number {
  if (candidates.length === 0) return -1;
  let best = -1;
  for (let step = 0; step < candidates.length; step++) {
    const i = (cursor + step) % candidates.length;
    if (best === -1 || candidates[i]!.active < candidates[best]!.active) best = i;
  }
  return best;
}

export type PoolChange = { url: string; healthy: boolean; reason: string };

/** Outlier detection off: what a pool built without options does. */
const NO_OUTLIERS: OutlierOptions = { consecutive5xx: 0, baseEjectionMs: 30_000, maxEjectionPercent: 50 };

export class BackendPool {
  readonly #backends = new Map<string, Backend>();
  #cursor = 0;
  #order = 0;
  readonly #candidates: Backend[] = [];
  readonly #outliers: OutlierDetector;
  readonly #now: () => number;

  /** `now`: monotonic milliseconds (the ejections' clock). */
  constructor(options: { outlier?: OutlierOptions; now?: () => number } = {}) {
    this.#outliers = new OutlierDetector(options.outlier ?? NO_OUTLIERS);
    this.#now = options.now ?? (() => performance.now());
  }

  /** Replaces the known set. New gateways wait for their first passing probe; gone ones leave at once. */
  update(specs: readonly BackendSpec[]): { added: string[]; removed: string[] } {
    const wanted = new Map(specs.map((s) => [s.url, s]));
    const removed: string[] = [];
    const added: string[] = [];
    for (const url of this.#backends.keys()) {
      if (!wanted.has(url)) {
        this.#backends.delete(url);
        this.#outliers.forget(url);
        removed.push(url);
      }
    }
    for (const spec of wanted.values()) {
      const known = this.#backends.get(spec.url);
      if (known) known.role = spec.role;
      else {
        this.#backends.set(spec.url, {
          url: spec.url,
          role: spec.role,
          healthy: false,
          active: 0,
          store: 'unknown',
          order: this.#order++,
          lastError: 'not probed yet',
        });
        added.push(spec.url);
      }
    }
    return { added, removed };
  }

  /** A probe result; returns the change when health flipped. */
  recordProbe(url: string, ok: boolean, reason: string): PoolChange | undefined {
    const backend = this.#backends.get(url);
    if (!backend || backend.healthy === ok) return undefined;
    backend.healthy = ok;
    backend.lastError = ok ? undefined : reason;
    return { url, healthy: ok, reason };
  }

  /** The store state a passing probe reported; returns the previous one when it changed. */
  recordStore(url: string, store: BackendStoreState): BackendStoreState | undefined {
    const backend = this.#backends.get(url);
    if (!backend || backend.store === store) return undefined;
    const previous = backend.store;
    backend.store = store;
    return previous;
  }

  /**
   * A content read's outcome at `url` for outlier detection (`failed`: a failure of the gateway's own,
   * as proxied-request.ts judges it); returns the ejection it caused.
   */
  recordRead(url: string, failed: boolean): Ejection | undefined {
    // A read still in flight when its gateway left the pool: its state was forgotten and stays so
    // (an orphan ejection would count against the bound for ever).
    if (!this.#outliers.enabled || !this.#backends.has(url)) return undefined;
    return this.#outliers.record(url, failed, this.#now(), this.#backends.size);
  }

  /** A proxied request could not reach the gateway: out of the pool until a probe passes. */
  markUnreachable(url: string, reason: string): PoolChange | undefined {
    return this.recordProbe(url, false, reason);
  }

  /**
   * The target for a request of `kind`, skipping `exclude` (the backend that just failed). The view
   * is live (its `active` and `healthy` follow the pool); callers read its `url` and `role`.
   */
  pick(kind: RequestClass, exclude?: ReadonlySet<string>): BackendView | undefined {
    // Map order is discovery order (`order` only grows, on insertion): no sort needed. The
    // candidates go to a reused array: this runs for every proxied request.
    const candidates = this.#candidates;
    candidates.length = 0;
    const reads = kind === 'content-read';
    const outliers = this.#outliers.enabled;
    const now = outliers ? this.#now() : 0;
    let fallback = false;
    for (const b of this.#backends.values()) {
      if (!b.healthy || (!reads && b.role !== 'writer') || exclude?.has(b.url)) continue;
      if (reads && (b.store === 'unreachable' || (outliers && this.#outliers.isEjected(b.url, now)))) {
        fallback = true;
        continue;
      }
      candidates.push(b);
    }
    // No gateway that could serve the read: every healthy one is tried, each answers for itself.
    if (candidates.length === 0 && fallback)
      for (const b of this.#backends.values()) if (b.healthy && !exclude?.has(b.url)) candidates.push(b);
    const index = pickLeastActive(candidates, this.#cursor % Math.max(1, candidates.length));
    const picked = index === -1 ? undefined : candidates[index];
    candidates.length = 0;
    if (!picked) return undefined;
    this.#cursor = index + 1;
    return picked;
  }

  /** Counts a request against `url` until the returned release is called (once). */
  acquire(url: string): () => void {
    const backend = this.#backends.get(url);
    if (!backend) return () => {};
    backend.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      backend.active--;
    };
  }

  urls(): string[] {
    return [...this.#backends.keys()];
  }

  has(url: string): boolean {
    return this.#backends.has(url);
  }

  snapshot(): Array<BackendView & { lastError: string | undefined; ejected: boolean }> {
    const now = this.#now();
    return [...this.#backends.values()]
      .sort((a, b) => a.order - b.order)
      .map((b) => ({
        url: b.url,
        role: b.role,
        healthy: b.healthy,
        active: b.active,
        store: b.store,
        ejected: this.#outliers.isEjected(b.url, now),
        lastError: b.lastError,
      }));
  }

  /** Router `/health/status`: at least one gateway can serve reads. */
  get canServeReads(): boolean {
    return [...this.#backends.values()].some((b) => b.healthy);
  }

  get hasHealthyWriter(): boolean {
    return [...this.#backends.values()].some((b) => b.healthy && b.role === 'writer');
  }
}
