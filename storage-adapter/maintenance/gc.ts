/**
 * Offline garbage collection: removes blobs no catalog row references, everything in `tmp/` (stray
 * temporaries of uploads that never finished), and part objects or session folders no open upload
 * session owns. Run only under the exclusive maintenance barrier, so nothing is being written
 * while it decides. Works on either store through its `StoreTree`.
 */
import type pg from 'pg';
import { createFsTree } from '../fs/index.ts';
import { TMP_DIR, UPLOADS_DIR } from '../paths.ts';
import type { StoreTree } from '../store.ts';
import { walkBlobs } from './walk-blobs.ts';

export interface GcReport {
  dryRun: boolean;
  keptBlobs: number;
  orphanBlobs: string[];
  staleTmp: string[];
  staleUploads: string[];
  /** S3 only: multipart uploads never completed nor aborted (object names), aborted by gc. */
  incompleteUploads: string[];
  bytesFreed: number;
}

/** `root` is a filesystem store root or any store's tree. */
export async function collectGarbage(
  root: string | StoreTree,
  pool: pg.Pool,
  options: { dryRun: boolean; onProgress?: (seen: number) => void },
): Promise<GcReport> {
  const tree = typeof root === 'string' ? createFsTree(root) : root;
  const report: GcReport = {
    dryRun: options.dryRun,
    keptBlobs: 0,
    orphanBlobs: [],
    staleTmp: [],
    staleUploads: [],
    incompleteUploads: [],
    bytesFreed: 0,
  };
  const remove = async (target: string, sizeBytes: number) => {
    report.bytesFreed += sizeBytes;
    if (!options.dryRun) await tree.remove(target);
  };
  const referenced = new Set(
    (await pool.query<{ sha256: string }>('SELECT DISTINCT sha256 FROM arkvory_artifacts')).rows.map((r) => r.sha256),
  );
  let seen = 0;
  for await (const blob of walkBlobs(tree)) {
    seen++;
    if (referenced.has(blob.name)) report.keptBlobs++;
    else {
      report.orphanBlobs.push(blob.name);
      await remove(blob.file, blob.sizeBytes);
    }
    options.onProgress?.(seen);
  }
  // The slice cache serves a blob only while its digests are recorded: every gateway removes the
  // slices of these when it starts (gc runs with every gateway stopped).
  if (!options.dryRun && report.orphanBlobs.length > 0)
    await pool.query('DELETE FROM arkvory_blob_slices WHERE sha256 = ANY($1::text[])', [report.orphanBlobs]);
  for (const entry of await tree.list(TMP_DIR)) {
    const target = `${TMP_DIR}/${entry.name}`;
    // A gateway's own staging directory stays behind empty on the static-HTTP store (a PUT creates
    // it, a MOVE leaves it): no temporary, so it is removed without being reported.
    if (entry.isDirectory && (await tree.list(target)).length === 0) {
      if (!options.dryRun) await tree.remove(target);
      continue;
    }
    report.staleTmp.push(entry.name);
    await remove(target, entry.sizeBytes);
  }
  // Under the barrier no upload is running, so every open multipart upload is abandoned.
  for (const upload of (await tree.incompleteUploads?.()) ?? []) {
    report.incompleteUploads.push(upload.name);
    if (!options.dryRun) await upload.abort();
  }
  const live = await pool.query<{ session_id: string; file_name: string }>(
    `SELECT p.session_id, p.file_name FROM arkvory_upload_parts p JOIN arkvory_upload_sessions s ON s.id = p.session_id WHERE s.state IN ('open', 'completing')`,
  );
  const liveFiles = new Set(live.rows.map((r) => `${r.session_id}/${r.file_name}`));
  // Every open session, with parts recorded or not yet: only its files that no row names are stale.
  const open = await pool.query<{ id: string }>(
    `SELECT id::text FROM arkvory_upload_sessions WHERE state IN ('open', 'completing')`,
  );
  const liveSessions = new Set(open.rows.map((r) => r.id));
  for (const session of await tree.list(UPLOADS_DIR)) {
    const dir = `${UPLOADS_DIR}/${session.name}`;
    const files = session.isDirectory ? await tree.list(dir) : [];
    if (!liveSessions.has(session.name)) {
      report.staleUploads.push(session.name);
      await remove(
        dir,
        files.reduce((n, f) => n + f.sizeBytes, session.sizeBytes),
      );
      continue;
    }
    for (const file of files) {
      if (!liveFiles.has(`${session.name}/${file.name}`)) {
        report.staleUploads.push(`${session.name}/${file.name}`);
        await remove(`${dir}/${file.name}`, file.sizeBytes);
      }
    }
  }
  return report;
}
