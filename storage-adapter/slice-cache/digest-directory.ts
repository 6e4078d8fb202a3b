/**
 * Which blobs the slice cache may serve, and their slice digests: read from the catalog
 * (`arkvory_blob_slices`) and kept in memory only while the catalog epoch watcher trusts its last
 * poll, exactly like the cached catalog rows. gc and scrub delete a removed or quarantined blob's
 * row, which bumps the epoch: every gateway then forgets what it knew and asks again, so a blob
 * stops being served from any gateway's cache within the catalog cache's bound.
 */
import type { SliceDigests } from '../slice-digests.ts';

/** The catalog epoch watcher, as the slice cache needs it (lib/epoch-watcher.ts). */
export interface DigestValidity {
  readonly trusted: boolean;
  readonly generation: number;
  onInvalidate(listener: () => void): void;
}

export class DigestDirectory {
  readonly #lookup: (sha256: string) => Promise<SliceDigests | undefined>;
  readonly #validity: DigestValidity;
  #known = new Map<string, SliceDigests | null>();
  #inflight = new Map<string, Promise<SliceDigests | undefined>>();

  constructor(lookup: (sha256: string) => Promise<SliceDigests | undefined>, validity: DigestValidity) {
    this.#lookup = lookup;
    this.#validity = validity;
    validity.onInvalidate(() => {
      this.#known = new Map();
      this.#inflight = new Map();
    });
  }

  /** The digests, or undefined when the blob has none (not recorded yet, or removed). */
  get(sha256: string): Promise<SliceDigests | undefined> {
    if (!this.#validity.trusted) return this.#lookup(sha256);
    const known = this.#known.get(sha256);
    if (known !== undefined) return Promise.resolve(known ?? undefined);
    const pending = this.#inflight.get(sha256);
    if (pending) return pending;
    const generation = this.#validity.generation;
    const known_ = this.#known;
    const table = this.#inflight;
    const promise = this.#lookup(sha256)
      .then((d) => {
        // A result that raced an invalidation is used, not kept. Absence is kept too (a blob
        // without digests is looked up once per epoch, not per request): digests recorded later
        // for a published blob bump the epoch (migration 0030), so they are seen within the bound.
        if (this.#validity.trusted && this.#validity.generation === generation && known_.size < 100_000)
          known_.set(sha256, d ?? null);
        return d;
      })
      .finally(() => {
        if (table.get(sha256) === promise) table.delete(sha256);
      });
    table.set(sha256, promise);
    return promise;
  }
}
