/**
 * `arkvory backup`: one database snapshot plus every blob it references, into
 * `<destination>/<name>.<host>.<pid>.partial/`, renamed to `<destination>/<name>/` once the sealed manifest is
 * written. An interrupted backup therefore never has a manifest under a backup's name. Every file is
 * fsynced, then every directory holding one, before the manifest is written: a power cut cannot keep
 * the manifest and lose the names of files it counts.
 */
import { createHash } from 'node:crypto';
import { mkdir, open, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import type { ByteMeter } from '../byte-meter.ts';
import { fsyncDirectory, mkdirDurable } from '../../lib/fs-sync.ts';
import type { ArtifactStore } from '../store.ts';
import {
  backupName,
  blobDirectories,
  completeBackups,
  nextSequence,
  localHostName,
  type PartialMaker,
  partialName,
  pruneBackups,
  removeStalePartials,
  startPartialHeartbeat,
} from './backup-dir.ts';
import { putBlob, type BlobOutcome } from './blob-copy.ts';
import { dumpDatabase } from './database-dump.ts';
import { BackupError } from './errors.ts';
import {
  BACKUP_FORMAT,
  DATABASE_FILE,
  MANIFEST_FILE,
  RULE_DOCUMENTS_FILE,
  sealManifest,
  type BackupManifest,
} from './manifest.ts';

export interface BackupOptions {
  readonly destination: string;
  readonly pool: pg.Pool;
  readonly store: ArtifactStore;
  /** The directory store's root, when the store is one: its blob files are read (or hard-linked) there. */
  readonly fsRoot?: string | undefined;
  readonly meter?: ByteMeter | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Keep only this many complete backups (the new one included); undefined keeps all. */
  readonly keep?: number | undefined;
  readonly nowMs: () => number;
  /** Who makes this backup's partial directory; this host and process by default. */
  readonly maker?: PartialMaker | undefined;
  readonly onProgress?: ((done: number, total: number, bytes: number) => void) | undefined;
  /** Rule documents kept outside the database (Redis), by limiter; read right after the snapshot. */
  readonly ruleDocuments?: (() => Promise<Record<string, unknown>>) | undefined;
  /** fsync of a directory (`fsyncDirectory`); tests observe which are synced, and when. */
  readonly syncDirectory?: ((dir: string) => Promise<void>) | undefined;
}

export interface BackupSummary {
  backup: string;
  snapshotTime: string;
  tables: Record<string, number>;
  ruleDocuments: number;
  blobs: { count: number; bytes: number } & Record<BlobOutcome, number>;
  removedPartials: string[];
  /** Blob files of earlier backups that no longer match their sha256 (copied afresh instead of linked). */
  damagedEarlier: string[];
  pruned: string[];
  /** Why removing older backups (`keep`) failed; the backup itself was made. */
  pruneError?: string;
}

async function writeFileDurably(file: string, text: string): Promise<void> {
  const handle = await open(file, 'wx', 0o644);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function runBackup(options: BackupOptions): Promise<BackupSummary> {
  const destination = path.resolve(options.destination);
  const syncDirectory = options.syncDirectory ?? fsyncDirectory;
  // A destination made here must outlast a power cut as the backup inside it does.
  await mkdirDurable(destination, path.parse(destination).root, syncDirectory);
  const maker = options.maker ?? { host: localHostName(), pid: process.pid };
  const removedPartials = await removeStalePartials(destination, maker, options.nowMs());
  const earlier = (await completeBackups(destination)).reverse();
  let name = backupName(options.nowMs());
  if (earlier.some((dir) => path.basename(dir) === name)) name = `${name}-${maker.pid}`;
  const partial = path.join(destination, partialName(name, maker));
  await mkdir(partial);
  // Other hosts sharing the destination cannot ask our pid; a fresh mtime tells them we are alive.
  const stopHeartbeat = startPartialHeartbeat(partial, options.nowMs);
  // Hard links only within one filesystem; across, a blob is copied in one pass (read, hash, write).
  const linkable = options.fsRoot !== undefined && (await stat(options.fsRoot)).dev === (await stat(partial)).dev;
  const final = path.join(destination, name);
  // Once renamed, a failure (the destination's fsync) must not leave it complete-looking: exit 1 means none.
  let renamed = false;
  try {
    const dump = await dumpDatabase(options.pool, path.join(partial, DATABASE_FILE), options.signal);
    let ruleDocuments: BackupManifest['ruleDocuments'] = null;
    if (options.ruleDocuments) {
      const docs = await options.ruleDocuments();
      const text = `${JSON.stringify(docs, null, 2)}\n`;
      await writeFileDurably(path.join(partial, RULE_DOCUMENTS_FILE), text);
      ruleDocuments = {
        file: RULE_DOCUMENTS_FILE,
        count: Object.keys(docs).length,
        bytes: Buffer.byteLength(text),
        sha256: createHash('sha256').update(text).digest('hex'),
      };
    }
    const outcomes: Record<BlobOutcome, number> = { reused: 0, linked: 0, copied: 0 };
    let bytes = 0;
    const damagedEarlier: string[] = [];
    for (const [i, blob] of dump.blobs.entries()) {
      options.signal?.throwIfAborted();
      outcomes[
        await putBlob(partial, blob, earlier, {
          store: options.store,
          fsRoot: options.fsRoot,
          linkable,
          meter: options.meter,
          signal: options.signal,
          onDamagedEarlier: (file) => damagedEarlier.push(file),
        })
      ]++;
      bytes += blob.sizeBytes;
      options.onProgress?.(i + 1, dump.blobs.length, bytes);
    }
    const manifest: BackupManifest = {
      format: BACKUP_FORMAT,
      snapshotTime: dump.snapshotTime,
      completedAt: new Date(options.nowMs()).toISOString(),
      storageId: dump.storageId,
      store: { kind: options.store.kind, location: options.store.location },
      schemaVersion: dump.schemaVersion,
      tables: dump.tables,
      database: { file: DATABASE_FILE, bytes: dump.bytes, sha256: dump.sha256 },
      blobs: { count: dump.blobs.length, bytes },
      ruleDocuments,
    };
    options.signal?.throwIfAborted();
    // Its place among the backups under the destination, taken as late as can be: after any that
    // finished while this one ran.
    const sealed: BackupManifest = { ...manifest, sequence: await nextSequence(destination) };
    // The files are fsynced as they are written (a linked or reused blob is a durable file's second
    // name); their names are durable once their directories are, the backup's own last (it holds
    // the database file, the rule documents and `blobs/`).
    for (const dir of blobDirectories(dump.blobs.map((b) => b.sha256))) await syncDirectory(path.join(partial, dir));
    await syncDirectory(partial);
    await writeFileDurably(path.join(partial, MANIFEST_FILE), sealManifest(sealed));
    await syncDirectory(partial);
    stopHeartbeat();
    await rename(partial, final);
    renamed = true;
    await syncDirectory(destination);
    // The backup is made: failing to remove old ones is reported with it, never as a failed backup.
    let pruned: string[] = [];
    let pruneError: string | undefined;
    if (options.keep !== undefined)
      try {
        pruned = await pruneBackups(destination, options.keep, final, maker);
      } catch (err) {
        // This backup itself is gone (another backup's prune, at the same time): none was made here.
        if (err instanceof BackupError && err.code === 'backup_removed') throw err;
        pruneError = (err as Error).message;
      }
    return {
      backup: final,
      snapshotTime: dump.snapshotTime,
      tables: Object.fromEntries(dump.tables.map((t) => [t.name, t.rows])),
      ruleDocuments: ruleDocuments?.count ?? 0,
      blobs: { count: dump.blobs.length, bytes, ...outcomes },
      removedPartials,
      damagedEarlier,
      pruned,
      ...(pruneError !== undefined ? { pruneError } : {}),
    };
  } catch (err) {
    stopHeartbeat();
    await rm(renamed ? final : partial, { recursive: true, force: true });
    throw err;
  }
}
