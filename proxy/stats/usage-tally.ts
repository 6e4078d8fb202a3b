/**
 * Usage counted in memory between flushes (pure, no I/O): per artifact the downloads, bytes, the
 * latest download and who made it; per principal and UTC day the requests and bytes each way.
 * `drain()` hands the counts over and starts afresh; a gateway adds them to the database in one
 * batch (usage-store.ts), so no request writes to the database.
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

export class UsageTally {
  #artifacts = new Map<string, ArtifactUsage>();
  #principalDays = new Map<string, PrincipalDayUsage>();
  // The day of the last request and its bounds: formatting a date costs microseconds, every request.
  #day = '';
  #dayStartMs = 0;
  #dayEndMs = 0;

  #dayOf(wallMs: number): string {
    if (wallMs < this.#dayStartMs || wallMs >= this.#dayEndMs) {
      this.#dayStartMs = Math.floor(wallMs / DAY_MS) * DAY_MS;
      this.#dayEndMs = this.#dayStartMs + DAY_MS;
      this.#day = utcDay(wallMs);
    }
    return this.#day;
  }

  /** Distinct rows held now (the flush bound is on this). */
  get size(): number {
    return this.#artifacts.size + this.#principalDays.size;
  }

  download(key: ArtifactKey, bytes: number, principalId: string | null, wallMs: number): void {
    const id = keyText(key);
    const row = this.#artifacts.get(id);
    if (!row) {
      this.#artifacts.set(id, { key, downloads: 1, bytes, lastAtMs: wallMs, lastDownloader: principalId });
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
    const day = this.#dayOf(wallMs);
    const id = `${principalId}\u0000${day}`;
    const row = this.#principalDays.get(id);
    if (!row) {
      this.#principalDays.set(id, { principalId, day, requests: 1, bytesDown, bytesUp });
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

  /** Gives a batch whose flush failed back, merged with what came since (counts are sums). */
  restore(batch: UsageBatch): void {
    for (const a of batch.artifacts) {
      const row = this.#artifacts.get(keyText(a.key));
      if (!row) this.#artifacts.set(keyText(a.key), { ...a });
      else {
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
      if (!row) this.#principalDays.set(id, { ...p });
      else {
        row.requests += p.requests;
        row.bytesDown += p.bytesDown;
        row.bytesUp += p.bytesUp;
      }
    }
  }
}
