/**
 * Usage counted in memory between flushes (pure, no I/O): per artifact the downloads, bytes, the
 * latest download and who made it; per principal and UTC day the requests and bytes each way.
 * `drain()` hands the counts over and starts afresh; a gateway adds them to the database in one
 * batch (usage-store.ts), so no request writes to the database. At most `capacity` distinct rows are
 * held: a count for a row past it is dropped and counted in `dropped`, while the rows held go on
 * summing, so a database that does not answer costs no more memory than that.
 */
import type { ArtifactKey } from '../../storage-adapter/catalog/catalog.ts';

export interface ArtifactUsage {
  readonly key: ArtifactKey;
  downloads: number;
  bytes: number;
  lastAtMs: number;
  lastDownloader: string | null;
}

export interface PrincipalDayUsage {
  readonly principalId: string;
  /** `YYYY-MM-DD`, UTC. */
  readonly day: string;
  requests: number;
  bytesDown: number;
  bytesUp: number;
}

export interface UsageBatch {
  readonly artifacts: ArtifactUsage[];
  readonly principalDays: PrincipalDayUsage[];
}

const keyText = (k: ArtifactKey) => `${k.repository}\u0000${k.kind}\u0000${k.name}\u0000${k.version}\u0000${k.asset}`;

export function utcDay(wallMs: number): string {
  return new Date(wallMs).toISOString().slice(0, 10);
}

const DAY_MS = 86_400_000;

/** Downloads and requests not counted since the tally was made: their row did not fit. */
export interface UsageDropped {
  downloads: number;
  requests: number;
}

export class UsageTally {
  /** Distinct rows it may hold; lowered while rows it handed over are held elsewhere. */
  capacity: number;
  readonly dropped: UsageDropped = { downloads: 0, requests: 0 };
  #artifacts = new Map<string, ArtifactUsage>();
  #principalDays = new Map<string, PrincipalDayUsage>();
  /** The UTC day of the last request counted (epoch milliseconds have no leap seconds: a day is DAY_MS). */
  #dayNumber = Number.NaN;
  #day = '';

  constructor(capacity = Number.POSITIVE_INFINITY) {
    this.capacity = capacity;
  }

  /** Distinct rows held now (the flush bound is on this). */
  get size(): number {
    return this.#artifacts.size + this.#principalDays.size;
  }

  download(key: ArtifactKey, bytes: number, principalId: string | null, wallMs: number): void {
    const id = keyText(key);
    const row = this.#artifacts.get(id);
    if (!row) {
      if (this.size >= this.capacity) this.dropped.downloads++;
      else this.#artifacts.set(id, { key, downloads: 1, bytes, lastAtMs: wallMs, lastDownloader: principalId });
      return;
    }
    row.downloads++;
    row.bytes += bytes;
    if (wallMs >= row.lastAtMs) {
      row.lastAtMs = wallMs;
      row.lastDownloader = principalId;
    }
  }

  request(principalId: string, bytesDown: number, bytesUp: number, wallMs: number): void {
    const dayNumber = Math.floor(wallMs / DAY_MS);
    if (dayNumber !== this.#dayNumber) {
      this.#dayNumber = dayNumber;
      this.#day = utcDay(wallMs);
    }
    const day = this.#day;
    const id = `${principalId}\u0000${day}`;
    const row = this.#principalDays.get(id);
    if (!row) {
      if (this.size >= this.capacity) this.dropped.requests++;
      else this.#principalDays.set(id, { principalId, day, requests: 1, bytesDown, bytesUp });
      return;
    }
    row.requests++;
    row.bytesDown += bytesDown;
    row.bytesUp += bytesUp;
  }

  /** Everything counted since the last drain; the tally is empty afterwards. */
  drain(): UsageBatch {
    const batch = { artifacts: [...this.#artifacts.values()], principalDays: [...this.#principalDays.values()] };
    this.#artifacts = new Map();
    this.#principalDays = new Map();
    return batch;
  }

  /**
   * Gives a batch whose flush failed back, merged with what came since (counts are sums); a row of
   * it that no longer fits is dropped and counted.
   */
  restore(batch: UsageBatch): void {
    for (const a of batch.artifacts) {
      const row = this.#artifacts.get(keyText(a.key));
      if (!row) {
        if (this.size >= this.capacity) this.dropped.downloads += a.downloads;
        else this.#artifacts.set(keyText(a.key), { ...a });
      } else {
        row.downloads += a.downloads;
        row.bytes += a.bytes;
        if (a.lastAtMs > row.lastAtMs) {
          row.lastAtMs = a.lastAtMs;
          row.lastDownloader = a.lastDownloader;
        }
      }
    }
    for (const p of batch.principalDays) {
      const id = `${p.principalId}\u0000${p.day}`;
      const row = this.#principalDays.get(id);
      if (!row) {
        if (this.size >= this.capacity) this.dropped.requests += p.requests;
        else this.#principalDays.set(id, { ...p });
      } else {
        row.requests += p.requests;
        row.bytesDown += p.bytesDown;
        row.bytesUp += p.bytesUp;
      }
    }
  }
}
