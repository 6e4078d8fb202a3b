/**
 * Atomic immutable publish: stream to tmp/ while hashing → fsync → rename into blobs/ (over any file there) → fsync dir →
 * one catalog insert (the static-HTTP store: PUT to tmp/ → verify → MOVE into blobs/ → insert). Until the insert commits nothing is visible; any failure before it leaves at
 * most an unreferenced blob (offline gc) and never a row without whole bytes.
 */
import type { ArtifactKey, Catalog, CatalogEntry, PublishAuthority } from './catalog.ts';
import { StorageError } from '../errors.ts';
import type { StagedBlob, StageOptions, ArtifactStore } from '../store.ts';

export interface PublishRequest {
  readonly key: ArtifactKey;
  readonly body: AsyncIterable<Uint8Array>;
  readonly contentType: string;
  readonly publishedBy: string | null;
  readonly stage: StageOptions;
  /** Stages the bytes another way than `store.stage(body)` (server-side assembly); undefined → `body` is staged. */
  readonly stager?: ((options: StageOptions) => Promise<StagedBlob | undefined>) | undefined;
  /**
   * The request's write preconditions, checked against a row found under the key (there before, or
   * a concurrent publisher's that won) before its bytes are compared: one that fails throws (412)
   * whatever the bytes, as it would have had that row been there when the request began.
   */
  readonly precondition?: ((current: CatalogEntry) => void) | undefined;
  /**
   * Asks again whether the publisher may still write here, once the bytes are staged and before
   * anything is done with them, whether or not the same bytes are already published under the key
   * (rejects to publish nothing: a revoked uploader is not told its bytes match).
   */
  readonly authorize?: (() => Promise<void>) | undefined;
  /** Checked once more by the catalog insert's own statement, after the bytes are committed (catalog.ts). */
  readonly authority?: PublishAuthority | undefined;
  /** A storage-quota reservation the catalog insert settles (deletes) in the same statement. */
  readonly settleReservation?: string | undefined;
  /**
   * Decides on the staged bytes, once known and unless already published under the key, before
   * they are committed: returns the storage-quota reservation to settle (instead of
   * `settleReservation`), or rejects to publish nothing.
   */
  readonly admit?:
    | ((staged: { readonly sha256: string; readonly sizeBytes: number }) => Promise<string | undefined>)
    | undefined;
}

/** `created`: a new row; `unchanged`: the same bytes were already published under the key. */
export type PublishOutcome = { readonly outcome: 'created' | 'unchanged'; readonly entry: CatalogEntry };

function compare(existing: CatalogEntry, sha256: string): PublishOutcome {
  if (existing.sha256 !== sha256)
    throw new StorageError('conflict', 'Different content is already published under this name.');
  return { outcome: 'unchanged', entry: existing };
}

export async function publishArtifact(
  deps: { store: ArtifactStore; catalog: Catalog },
  request: PublishRequest,
): Promise<PublishOutcome> {
  // Whether the key is free before the bytes arrive lets a store skip a copy (see StageOptions).
  const keyWasFree = request.stage.expectedSha256 !== undefined && (await deps.catalog.get(request.key)) === undefined;
  const sliceBytes = deps.catalog.recordSlices ? (request.stage.sliceBytes ?? deps.catalog.sliceBytes) : undefined;
  const options = { ...request.stage, keyWasFree, sliceBytes };
  const staged = (await request.stager?.(options)) ?? (await deps.store.stage(request.body, options));
  try {
    await request.authorize?.();
    const existing = await deps.catalog.get(request.key);
    if (existing) {
      request.precondition?.(existing);
      const unchanged = compare(existing, staged.sha256);
      // The row names these very bytes, and what is under the blob name was never checked here: gone
      // (quarantined by scrub, lost by the store) or damaged (bit rot, cut short, replaced on the
      // host, even of the right size). The verified bytes take its place, so a 200 always means the
      // artifact reads back as its sha256. Every re-upload pays the commit: a rename, one MOVE, or an
      // S3 HEAD whose ETag match spares the copy. No row is written, and gc never removes the blob of
      // a row, so unlike the insert below this needs no maintenance barrier.
      await commitWithDigests(deps.catalog, staged);
      return unchanged;
    }
    const settleReservation = request.admit ? await request.admit(staged) : request.settleReservation;
    await commitWithDigests(deps.catalog, staged);
    const { inserted, entry } = await deps.catalog.insertOrGet(
      {
        ...request.key,
        sha256: staged.sha256,
        sizeBytes: staged.sizeBytes,
        contentType: request.contentType,
        publishedBy: request.publishedBy,
      },
      { settleReservation, authority: request.authority },
    );
    if (inserted && !(await deps.store.hasBlob(staged.sha256).catch(() => true))) {
      // The insert holds the maintenance barrier, so no gc runs now and none later removes the blob
      // of a row it sees. But a process whose lease connection ended holds the barrier no more, and
      // a whole gc may have run between the commit and the insert, removing the blob then: the row
      // is taken back. (A store that cannot answer now is taken as holding it: the usual case.)
      await deps.catalog.remove(request.key);
      throw new StorageError(
        'unavailable',
        'Offline maintenance removed the bytes before they were published; nothing was published. Send them again.',
      );
    }
    if (inserted) return { outcome: 'created', entry };
    request.precondition?.(entry);
    return compare(entry, staged.sha256);
  } finally {
    await staged.discard();
  }
}

/** Places the blob under its name, then its slice digests: a reader that finds a row can verify every slice it fills. */
async function commitWithDigests(catalog: Catalog, staged: StagedBlob): Promise<void> {
  await staged.commit();
  if (staged.sliceDigests) await catalog.recordSlices?.(staged.sha256, staged.sliceDigests);
}
