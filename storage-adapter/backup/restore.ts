/**
 * `arkvory restore`: a backup into an empty database and an empty storage root. Order: refuse a
 * non-empty target; recreate the storage identity (the backed-up id); put every blob through the
 * store (verified by hash as it is written); load every restorable table in one transaction; scrub.
 * Coordination state (leases, shared policy) is not restored; unfinished multipart sessions come
 * back aborted, since their parts are not in a backup.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type pg from 'pg';
import { createFsTree } from '../fs-tree.ts';
import { blobRelativePath, BLOBS_DIR, STORAGE_ID_FILE } from '../paths.ts';
import { scrubBlobs, type ScrubReport } from '../maintenance/scrub.ts';
import type { Store } from '../store.ts';
import { fileChunks } from './blob-copy.ts';
import { dumpLines, referencedBlobs } from './database-file.ts';
import { BackupError } from './errors.ts';
import { DATABASE_FILE, type SealedManifest } from './manifest.ts';
import { openBackup, readRuleDocuments } from './verify.ts';

const INSERT_ROWS = 500;
/** Rows here mean the database already holds an installation. */
const OCCUPIED_WHEN = ['arkvory_storage', 'arkvory_principals', 'arkvory_repositories', 'arkvory_artifacts'];
const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

export interface RestoreOptions {
  readonly backup: string;
  readonly pool: pg.Pool;
  /** The newest migration this code has; a backup from a newer schema is refused. */
  readonly codeSchemaVersion: number;
  /** The directory store's root, checked empty before anything is written. */
  readonly fsRoot?: string | undefined;
  /** Opens the target store as the writer, binding a fresh root to `storageId`. */
  readonly openTarget: (storageId: string) => Promise<Store>;
  readonly onProgress?: ((done: number, total: number, bytes: number) => void) | undefined;
  /** Writes backed-up rule documents (kept outside the database) into the target's rule store. */
  readonly writeRuleDocuments?: ((docs: Record<string, unknown>) => Promise<void>) | undefined;
}

export interface RestoreSummary {
  backup: string;
  snapshotTime: string;
  storageId: string;
  tables: Record<string, number>;
  blobs: { count: number; bytes: number };
  abortedUploads: number;
  ruleDocuments: number;
  scrub: ScrubReport;
}

async function refuseOccupiedDatabase(pool: pg.Pool): Promise<void> {
  const found: string[] = [];
  for (const table of OCCUPIED_WHEN) {
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${quoteIdent(table)}`);
    if (rows[0]!.n > 0) found.push(`${table}: ${rows[0]!.n} rows`);
  }
  if (found.length)
    throw new BackupError(
      'target_not_empty',
      `the target database is not empty (${found.join(', ')}); restore needs a new, empty database (createdb, then point ARKVORY_DATABASE_URL at it)`,
    );
}

async function refuseOccupiedRoot(tree: Store['tree'], where: string, storageIdPresent: boolean): Promise<void> {
  const blobDirs = await tree.list(BLOBS_DIR.split(path.sep).join('/'));
  if (storageIdPresent || blobDirs.length > 0) {
    throw new BackupError(
      'target_not_empty',
      `the target storage root ${where} is not empty (${storageIdPresent ? 'it has a storage-id' : 'it holds blobs'}); restore needs an empty root`,
    );
  }
}

async function tableColumns(client: pg.ClientBase, table: string): Promise<Set<string>> {
  const { rows } = await client.query<{ c: string }>(
    `SELECT column_name AS c FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND is_generated = 'NEVER'`,
    [table],
  );
  return new Set(rows.map((r) => r.c));
}

async function insertRows(
  client: pg.ClientBase,
  table: string,
  columns: Set<string>,
  rows: Array<Record<string, unknown>>,
): Promise<void> {
  if (!rows.length) return;
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))]
    .filter((c) => columns.has(c))
    .map(quoteIdent)
    .join(', ');
  await client.query(
    `INSERT INTO ${quoteIdent(table)} (${cols}) SELECT ${cols} FROM jsonb_populate_recordset(NULL::${quoteIdent(table)}, $1::jsonb)`,
    [JSON.stringify(rows)],
  );
}

/** One transaction: every restorable table emptied (migrations seed some) and loaded; sequences moved past the loaded ids. */
async function loadDatabase(pool: pg.Pool, file: string, manifest: SealedManifest): Promise<number> {
  const restorable = new Set(
    manifest.tables.filter((t) => t.restored && t.name !== 'arkvory_storage').map((t) => t.name),
  );
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const columns = new Map<string, Set<string>>();
    for (const table of manifest.tables.map((t) => t.name).filter((t) => restorable.has(t))) {
      const cols = await tableColumns(client, table);
      if (!cols.size)
        throw new BackupError(
          'schema_newer',
          `the backup holds table ${table}, which this code's schema does not have`,
        );
      columns.set(table, cols);
      await client.query(`DELETE FROM ${quoteIdent(table)}`);
    }
    let batch: Array<Record<string, unknown>> = [];
    let batchTable = '';
    for await (const { table, row } of dumpLines(file)) {
      if (!restorable.has(table)) continue;
      if (table !== batchTable || batch.length >= INSERT_ROWS) {
        await insertRows(client, batchTable, columns.get(batchTable) ?? new Set(), batch);
        batch = [];
        batchTable = table;
      }
      batch.push(row);
    }
    await insertRows(client, batchTable, columns.get(batchTable) ?? new Set(), batch);
    for (const [table, cols] of columns) {
      for (const col of cols) {
        const seq = await client.query<{ s: string | null }>('SELECT pg_get_serial_sequence($1, $2) AS s', [
          quoteIdent(table),
          col,
        ]);
        const name = seq.rows[0]?.s;
        if (name)
          await client.query(
            `SELECT setval($1, coalesce((SELECT max(${quoteIdent(col)}) FROM ${quoteIdent(table)}), 0) + 1, false)`,
            [name],
          );
      }
    }
    let aborted = 0;
    if (restorable.has('arkvory_upload_sessions')) {
      const sessions = await client.query<{ id: string }>(
        `UPDATE arkvory_upload_sessions SET state = 'aborted', error = 'interrupted by a restore from backup (parts are not backed up)', finished_at = now() WHERE state IN ('open', 'completing') RETURNING id`,
      );
      aborted = sessions.rowCount ?? 0;
      const ids = sessions.rows.map((r) => r.id);
      if (restorable.has('arkvory_upload_parts'))
        await client.query('DELETE FROM arkvory_upload_parts WHERE session_id = ANY($1::uuid[])', [ids]);
      if (restorable.has('arkvory_upload_jobs'))
        await client.query(
          `UPDATE arkvory_upload_jobs SET state = 'failed', error = 'interrupted by a restore from backup' WHERE state IN ('queued', 'running')`,
        );
    }
    await client.query('COMMIT');
    return aborted;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

export async function runRestore(options: RestoreOptions): Promise<RestoreSummary> {
  const manifest = await openBackup(options.backup);
  if (manifest.schemaVersion > options.codeSchemaVersion) {
    throw new BackupError(
      'schema_newer',
      `the backup was made at schema version ${manifest.schemaVersion}; this code knows up to ${options.codeSchemaVersion}: restore with the newer code`,
    );
  }
  await refuseOccupiedDatabase(options.pool);
  if (options.fsRoot !== undefined) {
    await refuseOccupiedRoot(
      createFsTree(options.fsRoot),
      options.fsRoot,
      existsSync(path.join(options.fsRoot, STORAGE_ID_FILE)),
    );
  }
  const store = await options.openTarget(manifest.storageId).catch((err: unknown) => {
    if ((err as { code?: string }).code === 'storage_mismatch')
      throw new BackupError(
        'target_not_empty',
        `the target storage root already belongs to an installation: ${(err as Error).message}`,
        { cause: err },
      );
    throw err;
  });
  try {
    if (options.fsRoot === undefined) await refuseOccupiedRoot(store.tree, store.location, false);
    const file = path.join(options.backup, DATABASE_FILE);
    const blobs = await referencedBlobs(file);
    let bytes = 0;
    for (const [i, blob] of blobs.entries()) {
      const staged = await store
        .stage(fileChunks(path.join(options.backup, blobRelativePath(blob.sha256))), {
          maxBytes: Number.MAX_SAFE_INTEGER,
          expectedLength: blob.sizeBytes,
          expectedSha256: blob.sha256,
        })
        .catch((err: unknown) => {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT')
            throw new BackupError(
              'blob_missing',
              `the backup lacks blob ${blob.sha256}; nothing of the catalog was restored`,
            );
          if (code === 'invalid_request')
            throw new BackupError(
              'blob_corrupt',
              `blob ${blob.sha256} in the backup does not match its sha256 (${(err as Error).message}); nothing of the catalog was restored`,
            );
          throw err;
        });
      await staged.commit();
      bytes += blob.sizeBytes;
      options.onProgress?.(i + 1, blobs.length, bytes);
    }
    const abortedUploads = await loadDatabase(options.pool, file, manifest);
    const ruleDocuments = await readRuleDocuments(options.backup, manifest);
    if (Object.keys(ruleDocuments).length && options.writeRuleDocuments)
      await options.writeRuleDocuments(ruleDocuments);
    const scrub = await scrubBlobs(store.tree);
    return {
      backup: options.backup,
      snapshotTime: manifest.snapshotTime,
      storageId: manifest.storageId,
      tables: Object.fromEntries(manifest.tables.filter((t) => t.restored).map((t) => [t.name, t.rows])),
      blobs: { count: blobs.length, bytes },
      abortedUploads,
      ruleDocuments: Object.keys(ruleDocuments).length,
      scrub,
    };
  } finally {
    await store.close();
  }
}
