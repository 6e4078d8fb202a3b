/**
 * Runs one completion job: reads the listed parts from the store in order (re-checking each part's
 * sha256 as it streams), and publishes the whole through the same atomic path as a full upload.
 * Store-side work, no client involved: no network quota applies (ADR 0008). With the static-HTTP
 * store the worker GETs each part and PUTs the assembled blob to tmp/, then MOVEs it into blobs/.
 * A store that can assemble server-side (the S3 store: UploadPartCopy) is asked first; it still
 * reads every part once to re-check its sha256 and compute the whole's, but uploads nothing.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { AuthorityVerdict, Catalog, CatalogEntry } from '../catalog/catalog.ts';
import { StorageError } from '../errors.ts';
import type { PartStore, ArtifactStore } from '../store.ts';
import { publishArtifact } from '../catalog/publish.ts';
import type { ReceivedPart } from './completion-plan.ts';
import { cappedPart } from '../part-reads.ts';

export interface Job {
  id: string;
  sessionId: string;
  parts: ReceivedPart[];
  attempts: number;
}

/** The listed parts' bytes in order, each re-checked (size, sha256) and read no further than its recorded size + 1. */
export async function* readParts(
  store: PartStore,
  sessionId: string,
  parts: readonly ReceivedPart[],
  files: ReadonlyMap<number, string>,
  signal: AbortSignal | undefined,
): AsyncGenerator<Buffer> {
  for (const part of parts) {
    const file = files.get(part.partNumber);
    if (!file) throw new StorageError('part_missing', `part ${part.partNumber} is no longer recorded`);
    const hash = createHash('sha256');
    let size = 0;
    // One byte past the recorded size is enough to tell the part grew: no more is read.
    for await (const chunk of cappedPart(store.read(sessionId, file, signal, part.sizeBytes + 1), part)) {
      hash.update(chunk);
      size += chunk.length;
      yield chunk;
    }
    if (size !== part.sizeBytes || hash.digest('hex') !== part.sha256) {
      throw new StorageError('part_mismatch', `part ${part.partNumber} changed on the store after it was received`);
    }
  }
}

/**
 * Assembles and publishes; resolves with the catalog entry and how the bytes were put together
 * (`server-copy`: by the store, `streamed`: through the worker), throws a StorageError to fail the job.
 */
export async function assembleJob(
  deps: {
    pool: pg.Pool;
    store: ArtifactStore;
    catalog: Catalog;
    /**
     * Decides the assembled bytes, once known and before they are committed, for the session's
     * repository and principal: returns the storage-quota reservation the catalog insert settles, or
     * rejects to publish nothing. Undefined: the session's own reservation (its id) is settled.
     */
    admit?: (
      session: { readonly repository: string; readonly principalId: string | null },
      staged: { readonly sha256: string; readonly sizeBytes: number },
    ) => Promise<string | undefined>;
    /** Asks again whether the session's principal may publish, once the bytes are staged (bytes already published too). */
    authorize?: () => Promise<void>;
    /** The refusal the catalog insert throws when it finds the session's principal may no longer publish (catalog.ts). */
    refuse?: (verdict: AuthorityVerdict) => Error;
  },
  job: Job,
  signal?: AbortSignal,
): Promise<{ entry: CatalogEntry; assembly: 'server-copy' | 'streamed' }> {
  const s = await deps.pool.query('SELECT * FROM arkvory_upload_sessions WHERE id = $1', [job.sessionId]);
  const row = s.rows[0];
  if (!row) throw new StorageError('not_found', 'the upload session is gone');
  const files = await deps.pool.query<{ part_number: number; file_name: string }>(
    'SELECT part_number, file_name FROM arkvory_upload_parts WHERE session_id = $1',
    [job.sessionId],
  );
  const total = job.parts.reduce((sum, p) => sum + p.sizeBytes, 0);
  const fileOf = new Map(files.rows.map((f) => [f.part_number, f.file_name]));
  const assembly = job.parts.map((p) => {
    const fileName = fileOf.get(p.partNumber);
    if (!fileName) throw new StorageError('part_missing', `part ${p.partNumber} is no longer recorded`);
    return { ...p, fileName };
  });
  const { store } = deps;
  let how: 'server-copy' | 'streamed' = 'streamed';
  const result = await publishArtifact(
    { store: deps.store, catalog: deps.catalog },
    {
      key: { repository: row.repository, kind: row.kind, name: row.name, version: row.version, asset: row.asset },
      body: readParts(deps.store.parts, job.sessionId, job.parts, fileOf, signal),
      stager:
        store.assembleParts &&
        (async (options) => {
          const staged = await store.assembleParts!(job.sessionId, assembly, options);
          if (staged) how = 'server-copy';
          return staged;
        }),
      contentType: row.content_type,
      publishedBy: row.principal_id,
      // A session's parts are reserved against the storage quotas under the session's id.
      settleReservation: job.sessionId,
      authorize: deps.authorize,
      authority: deps.refuse && { kind: 'session', sessionId: job.sessionId, refuse: deps.refuse },
      admit:
        deps.admit && ((staged) => deps.admit!({ repository: row.repository, principalId: row.principal_id }, staged)),
      stage: {
        maxBytes: Number.MAX_SAFE_INTEGER,
        expectedLength: total,
        expectedSha256: row.expected_sha256 ?? undefined,
        signal,
      },
    },
  );
  return { entry: result.entry, assembly: how };
}
