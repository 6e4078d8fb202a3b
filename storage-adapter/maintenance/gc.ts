/**
 * Offline garbage collection: removes blobs no catalog row references, everything in `tmp/`, and
 * part files or session folders no open upload session owns. Run only under the exclusive
 * maintenance barrier, so nothing is being written while it decides.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { BLOBS_DIR, resolveInsideRoot, TMP_DIR, UPLOADS_DIR } from '../paths.ts';
import { walkBlobs } from './walk-blobs.ts';

export interface GcReport {
  dryRun: boolean;
  keptBlobs: number;
  orphanBlobs: string[];
  staleTmp: string[];
  staleUploads: string[];
  bytesFreed: number;
}

async function sizeOf(p: string): Promise<number> {
  return (await stat(p).catch(() => ({ size: 0 }))).size;
}

export async function collectGarbage(root: string, pool: pg.Pool, options: { dryRun: boolean; onProgress?: (seen: number) => void }): Promise<GcReport> {
  const report: GcReport = { dryRun: options.dryRun, keptBlobs: 0, orphanBlobs: [], staleTmp: [], staleUploads: [], bytesFreed: 0 };
  const remove = async (p: string) => {
    report.bytesFreed += await sizeOf(p);
    if (!options.dryRun) await rm(p, { recursive: true, force: true });
  };
  const referenced = new Set((await pool.query<{ sha256: string }>('SELECT DISTINCT sha256 FROM arkvory_artifacts')).rows.map((r) => r.sha256));
  let seen = 0;
  for await (const blob of walkBlobs(resolveInsideRoot(root, BLOBS_DIR))) {
    seen++;
    if (referenced.has(blob.name)) report.keptBlobs++;
    else {
      report.orphanBlobs.push(blob.name);
      await remove(blob.file);
    }
    options.onProgress?.(seen);
  }
  const tmpDir = resolveInsideRoot(root, TMP_DIR);
  for (const entry of await readdir(tmpDir).catch(() => [] as string[])) {
    report.staleTmp.push(entry);
    await remove(path.join(tmpDir, entry));
  }
  const live = await pool.query<{ session_id: string; file_name: string }>(
    `SELECT p.session_id, p.file_name FROM arkvory_upload_parts p JOIN arkvory_upload_sessions s ON s.id = p.session_id WHERE s.state IN ('open', 'completing')`,
  );
  const liveFiles = new Set(live.rows.map((r) => `${r.session_id}/${r.file_name}`));
  const liveSessions = new Set(live.rows.map((r) => r.session_id));
  const uploadsDir = resolveInsideRoot(root, UPLOADS_DIR);
  for (const session of await readdir(uploadsDir).catch(() => [] as string[])) {
    const dir = path.join(uploadsDir, session);
    if (!liveSessions.has(session)) {
      report.staleUploads.push(session);
      await remove(dir);
      continue;
    }
    for (const file of await readdir(dir)) {
      if (!liveFiles.has(`${session}/${file}`)) {
        report.staleUploads.push(`${session}/${file}`);
        await remove(path.join(dir, file));
      }
    }
  }
  return report;
}
