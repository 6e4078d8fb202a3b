/**
 * Runs one completion job: reads the listed parts from disk in order (re-checking each part's
 * sha256 as it streams), and publishes the whole through the same atomic path as a full upload.
 * Disk-only work: no network quota applies (ADR 0008).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import type { Catalog, CatalogEntry } from '../catalog.ts';
import { StorageError } from '../errors.ts';
import type { FsStore } from '../fs-store.ts';
import { publishArtifact } from '../publish.ts';
import type { ReceivedPart } from './completion-plan.ts';
import { sessionDir, type UploadSessions } from './sessions.ts';

export interface Job {
  id: string;
  sessionId: string;
  parts: ReceivedPart[];
  attempts: number;
}

async function* readParts(dir: string, parts: readonly ReceivedPart[], files: ReadonlyMap<number, string>, signal: AbortSignal | undefined): AsyncGenerator<Buffer> {
  for (const part of parts) {
    const file = files.get(part.partNumber);
    if (!file) throw new StorageError('part_missing', `part ${part.partNumber} is no longer recorded`);
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of createReadStream(path.join(dir, file), { highWaterMark: 1024 * 1024, signal })) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
      yield chunk as Buffer;
    }
    if (size !== part.sizeBytes || hash.digest('hex') !== part.sha256) {
      throw new StorageError('part_mismatch', `part ${part.partNumber} changed on disk after it was received`);
    }
  }
}

/** Assembles and publishes; resolves with the catalog entry, throws a StorageError to fail the job. */
export async function assembleJob(deps: { pool: pg.Pool; store: FsStore; catalog: Catalog }, job: Job, signal?: AbortSignal): Promise<CatalogEntry> {
  const s = await deps.pool.query('SELECT * FROM arkvory_upload_sessions WHERE id = $1', [job.sessionId]);
  const row = s.rows[0];
  if (!row) throw new StorageError('not_found', 'the upload session is gone');
  const files = await deps.pool.query<{ part_number: number; file_name: string }>('SELECT part_number, file_name FROM arkvory_upload_parts WHERE session_id = $1', [job.sessionId]);
  const total = job.parts.reduce((sum, p) => sum + p.sizeBytes, 0);
  const result = await publishArtifact(
    { store: deps.store, catalog: deps.catalog },
    {
      key: { repository: row.repository, kind: row.kind, name: row.name, version: row.version, asset: row.asset },
      body: readParts(sessionDir(deps.store.root, job.sessionId), job.parts, new Map(files.rows.map((f) => [f.part_number, f.file_name])), signal),
      contentType: row.content_type,
      publishedBy: row.principal_id,
      stage: { maxBytes: Number.MAX_SAFE_INTEGER, expectedLength: total, expectedSha256: row.expected_sha256 ?? undefined, signal },
    },
  );
  return result.entry;
}
