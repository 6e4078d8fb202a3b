/**
 * `arkvory restore`: a backup into an empty database and an empty storage root, all or nothing.
 * Order: read and check the backup (checkBackup, before the caller opens or migrates the target);
 * refuse a non-empty target before anything is written (the database, then the storage root
 * through a store opened without binding: no storage-id is read or written at open); mark the root's
 * storage-id as an unfinished restore (so a restore killed from here on leaves a root no gateway
 * opens, and the next restore empties it first); put every blob through the store (verified by hash
 * as it is written, its slice digests computed in the same pass); in one transaction load every restorable table, record every blob's slice digests (so a restored
 * remote store's slice cache serves it without waiting for a scrub), the backed-up rule documents and
 * the `arkvory_storage` row, write the backup's id over the mark last and commit; scrub. A failure
 * anywhere before the commit (a damaged backup, a full disk, a store or Redis that went away,
 * SIGINT/SIGTERM) rolls the transaction back and removes every blob, temporary and the storage-id the
 * restore wrote, so the target is empty again and the restore can be retried.
 * Coordination state (leases, shared policy) is not restored; unfinished multipart sessions come
 * back aborted, since their parts are not in a backup.
 */
import { createHash, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { createFsTree } from '../fs/index.ts';
import { isAlive } from '../../lib/process-alive.ts';
import {
  fsIdentityObject,
  isRestoreMarker,
  type ReplaceOutcome,
  replacementToken,
  restoreMarker,
  restoreMarkOwner,
  type RestoreOwner,
} from '../identity.ts';
import { localHostName } from './backup-dir.ts';
import { blobRelativePath, BLOBS_DIR, STORAGE_ID_FILE, TMP_DIR } from '../paths.ts';
import { scrubBlobs, type ScrubReport } from '../maintenance/scrub.ts';
import { recordSliceDigests } from '../catalog/slice-rows.ts';
import { DEFAULT_SLICE_BYTES, SliceHasher, type SliceDigests } from '../slice-digests.ts';
import type { OpenedArtifactStore, ArtifactStore } from '../store.ts';
import { dumpLines, referencedBlobs } from './database-file.ts';
import { BackupError } from './errors.ts';
import { DATABASE_FILE, type SealedManifest } from './manifest.ts';
import { regularFileChunks } from './small-file.ts';
import { openBackup, readRuleDocuments } from './verify.ts';
import { inTransaction } from '../../lib/transaction.ts';

const INSERT_ROWS = 500;
/** At most about this many bytes of the database file's lines in one INSERT (a single longer row goes alone). */
const INSERT_BYTES = 16 * 1024 * 1024;
/** Rows here mean the database already holds an installation. */
const OCCUPIED_WHEN = ['arkvory_storage', 'arkvory_principals', 'arkvory_repositories', 'arkvory_artifacts'];
const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

export interface RestoreOptions {
  readonly backup: string;
  /** The backup as checkBackup read it (before the target was opened); else it is read here. */
  readonly checked?: CheckedBackup | undefined;
  readonly pool: pg.Pool;
  /** The newest migration this code has; a backup from a newer schema is refused. */
  readonly codeSchemaVersion: number;
  /** The directory store's root, checked empty before the store is even opened. */
  readonly fsRoot?: string | undefined;
  /**
   * Opens the target store as the writer for a restore (`restoreAs`: `storageId`): nothing bound,
   * nothing read or written at open; the restore writes its `identity` last.
   */
  readonly openTarget: (storageId: string) => Promise<OpenedArtifactStore>;
  readonly onProgress?: ((done: number, total: number, bytes: number) => void) | undefined;
  /**
   * Writes backed-up rule documents (kept outside the database) into the target's rule store, before
   * the commit: inside `tx` (the restore's transaction) when that store is the database; elsewhere
   * (Redis) giving `undoWith` how to undo the write before the write is sent, so a write that fails
   * with its outcome unknown is undone too should the restore roll back.
   */
  readonly writeRuleDocuments?:
    | ((
        docs: Record<string, unknown>,
        tx: pg.ClientBase,
        undoWith: (undo: () => Promise<void>) => void,
      ) => Promise<void>)
    | undefined;
  /**
   * Says which of the backed-up rule documents `docs` the target's rule store outside the database
   * (Redis) already holds with other contents, or undefined when none. A restore refuses to write over
   * them, as it refuses an occupied database or root: they are another installation's (a live one's
   * prefix in a copied configuration) or rules published since the backup. Not asked when the root is
   * marked by a stopped restore, whose documents they are.
   */
  readonly occupiedRuleStore?: ((docs: Record<string, unknown>) => Promise<string | undefined>) | undefined;
  /** Aborts the restore (SIGINT/SIGTERM); it is rolled back like any failure. */
  readonly signal?: AbortSignal | undefined;
  /** The slice size restored blobs' digests are recorded with (ARKVORY_CACHE_SLICE_BYTES). */
  readonly sliceBytes?: number | undefined;
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

/**
 * Refuses a database that holds an installation. Also called before the target is migrated (a
 * table that does not exist yet holds nothing), so an occupied database is not even migrated.
 */
export async function refuseOccupiedDatabase(pool: pg.Pool): Promise<void> {
  const found: string[] = [];
  for (const table of OCCUPIED_WHEN) {
    const exists = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [quoteIdent(table)]);
    if (exists.rows[0]?.t === null) continue;
    const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${quoteIdent(table)}`);
    if (rows[0]!.n > 0) found.push(`${table}: ${rows[0]!.n} rows`);
  }
  if (found.length)
    throw new BackupError(
      'target_not_empty',
      `the target database is not empty (${found.join(', ')}); restore needs a new, empty database (createdb, then point ARKVORY_DATABASE_URL at it)`,
    );
}

const BLOBS = BLOBS_DIR.split(path.sep).join('/');

/**
 * Every file (object) under `dir`, depth first. Directories alone do not count: an S3 server may go
 * on listing a "directory" whose objects were all deleted (SeaweedFS does), and a directory store
 * keeps the empty layout.
 */
async function* filesUnder(tree: ArtifactStore['tree'], dir: string): AsyncGenerator<string> {
  for (const entry of await tree.list(dir)) {
    if (entry.isDirectory) yield* filesUnder(tree, `${dir}/${entry.name}`);
    else yield `${dir}/${entry.name}`;
  }
}

async function firstFileUnder(tree: ArtifactStore['tree'], dir: string): Promise<string | undefined> {
  for await (const file of filesUnder(tree, dir)) return file;
  return undefined;
}

/**
 * Whether `pid` is a running `arkvory restore`: alive, and where /proc shows its command line, one
 * holding `restore` (the pid of a restore killed long ago may be another program's by now).
 */
async function isRestoreRunning(pid: number): Promise<boolean> {
  if (!isAlive(pid)) return false;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch((err: NodeJS.ErrnoException) =>
    // Gone since, where there is a /proc; no /proc (another system): alive is all we know.
    err.code === 'ENOENT' && existsSync('/proc/self') ? '' : undefined,
  );
  return cmdline === undefined || cmdline.split('\0').includes('restore');
}

/** This restore run, as its mark names it: this host, this pid, and a run of its own. */
const newRestoreRun = (): RestoreOwner => ({ host: localHostName(), pid: process.pid, run: randomUUID() });

/**
 * Refuses a root that holds a storage-id or blobs, unless its storage-id is the marker of a restore
 * stopped before its commit (identity.ts, restoreMarker): then everything there is that restore's
 * and true is returned (to be removed before this restore writes). `storageId` is the object's text.
 */
async function refuseOccupiedRoot(
  tree: ArtifactStore['tree'],
  where: string,
  storageId: string | undefined,
  self: RestoreOwner,
): Promise<boolean> {
  if (isRestoreMarker(storageId)) {
    // A mark is a stopped restore's only once its process is gone: a restore still writing there
    // (into another database: this one's barrier does not cover it) would lose its blobs to the emptying.
    const owner = restoreMarkOwner(storageId);
    if (owner && owner.host === self.host && owner.pid !== self.pid && (await isRestoreRunning(owner.pid)))
      throw new BackupError(
        'target_busy',
        `the target storage root ${where} is being restored by process ${owner.pid} on this host (its storage-id marks a restore in progress); wait for it to end, or stop it and run the restore again`,
      );
    return true;
  }
  if (storageId !== undefined || (await firstFileUnder(tree, BLOBS)) !== undefined) {
    throw new BackupError(
      'target_not_empty',
      `the target storage root ${where} is not empty (${storageId !== undefined ? 'it has a storage-id' : 'it holds blobs'}); restore needs an empty root`,
    );
  }
  return false;
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
    // The backed-up ids, also of an identity column GENERATED ALWAYS (the pre-sign secrets' ids sign links).
    `INSERT INTO ${quoteIdent(table)} (${cols}) OVERRIDING SYSTEM VALUE SELECT ${cols} FROM jsonb_populate_recordset(NULL::${quoteIdent(table)}, $1::jsonb)`,
    [JSON.stringify(rows)],
  );
}

/** In the caller's transaction: every restorable table emptied (migrations seed some) and loaded; sequences moved past the loaded ids. */
async function loadDatabase(client: pg.ClientBase, file: string, manifest: SealedManifest): Promise<number> {
  const restorable = new Set(
    manifest.tables.filter((t) => t.restored && t.name !== 'arkvory_storage').map((t) => t.name),
  );
  const columns = new Map<string, Set<string>>();
  for (const table of manifest.tables.map((t) => t.name).filter((t) => restorable.has(t))) {
    const cols = await tableColumns(client, table);
    if (!cols.size)
      throw new BackupError('schema_newer', `the backup holds table ${table}, which this code's schema does not have`);
    columns.set(table, cols);
    await client.query(`DELETE FROM ${quoteIdent(table)}`);
  }
  let batch: Array<Record<string, unknown>> = [];
  let batchTable = '';
  let batchBytes = 0;
  for await (const { table, row, bytes } of dumpLines(file, manifest.database.bytes)) {
    if (!restorable.has(table)) continue;
    // By bytes too: 500 rows of the longest a line may be would be one statement of gigabytes.
    if (table !== batchTable || batch.length >= INSERT_ROWS || batchBytes + bytes > INSERT_BYTES) {
      await insertRows(client, batchTable, columns.get(batchTable) ?? new Set(), batch);
      batch = [];
      batchBytes = 0;
      batchTable = table;
    }
    batch.push(row);
    batchBytes += bytes;
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
  // The storage-quota reservations are those of uploads in progress at the snapshot, none of which
  // goes on here (an open session's would hold its repository's quota until the session's expiry).
  if (restorable.has('arkvory_quota_reservations')) await client.query('DELETE FROM arkvory_quota_reservations');
  return aborted;
}

/** What emptying a restore target left: nothing when `problems` is empty. */
interface Emptied {
  readonly problems: string[];
  /** The storage-id still holds the restore's mark (emptying failed after writing it). */
  readonly marked: boolean;
}

/**
 * Removes what a failed restore wrote to the store: every blob, every temporary and the storage-id.
 * The root held no storage-id and no blobs when the restore began, or only what a restore stopped before its commit left under its mark (checked under
 * the exclusive maintenance barrier; no gateway opens a marked root, nor a root without a storage-id
 * as its writer without creating one), so everything there now is a restore's. Also empties such a
 * stopped restore's leftovers. The storage-id goes last and holds `mark` until then (written again
 * first, over the backup's id should the restore have got that far): emptying cut short (a kill, a
 * store error) leaves blobs only under the mark, which the same restore run again takes up. `mark` is
 * undefined when the restore wrote no storage-id. Empty again is checked by listing the root.
 */
async function emptyTarget(store: OpenedArtifactStore, mark: string | undefined, keepMark = false): Promise<Emptied> {
  const problems: string[] = [];
  const attempt = async (what: string, work: () => Promise<void>) => {
    try {
      await work();
    } catch (err) {
      problems.push(`${what}: ${(err as Error).message}`);
    }
  };
  const removeEntries = async (dir: string) => {
    for (const entry of await store.tree.list(dir)) await store.tree.remove(`${dir}/${entry.name}`);
  };
  if (mark !== undefined) await attempt(STORAGE_ID_FILE, () => store.identity.write(mark));
  const marked = mark !== undefined && !problems.length;
  await attempt(BLOBS, () => removeEntries(BLOBS));
  await attempt(TMP_DIR, () => removeEntries(TMP_DIR));
  const { incompleteUploads } = store.tree;
  if (incompleteUploads)
    await attempt('incomplete uploads', async () => {
      for (const upload of await incompleteUploads())
        if (upload.name.startsWith(`${TMP_DIR}/`) || upload.name.startsWith(`${BLOBS}/`)) await upload.abort();
    });
  if (!problems.length)
    await attempt('check', async () => {
      const left = [await firstFileUnder(store.tree, BLOBS), await firstFileUnder(store.tree, TMP_DIR)];
      if (left.some((f) => f !== undefined)) throw new Error(`still there: ${left.filter(Boolean).join(', ')}`);
    });
  if (!problems.length && mark !== undefined && !keepMark)
    await attempt(STORAGE_ID_FILE, async () => {
      await store.tree.remove(STORAGE_ID_FILE);
      if ((await store.identity.read()) !== undefined) throw new Error('still there');
    });
  return { problems, marked: marked && (problems.length > 0 || keepMark) };
}

/** What to do about a root emptying left `emptied` in. */
const whatIsLeft = (emptied: Emptied): string =>
  emptied.marked
    ? 'its storage-id still marks an unfinished restore: once the cause is fixed, the same restore run again removes the rest'
    : 'remove storage-id, any storage-id.replacing.*, blobs/ and tmp/ there before trying again';

/**
 * The error of a failed restore, its message extended with what the rollback left (nothing,
 * normally). The same error object, so its class, code and stack stay those of the failure.
 */
function rolledBack(err: unknown, where: string, emptied: Emptied): unknown {
  if (!(err instanceof Error)) return err;
  const { problems } = emptied;
  const note = problems.length
    ? `the database was rolled back, but not everything the restore wrote to the storage root ${where} could be removed (${problems.join('; ')}): ${whatIsLeft(emptied)}`
    : 'the restore was rolled back: the target database and storage root are empty again, so it can be retried';
  err.message = `${err.message}; ${note}`;
  return err;
}

/**
 * A blob file of the backup as a body, noting whether it was missing, not a regular file (`refused`:
 * a named pipe would otherwise hold the restore until a writer came) or did not match (size, sha256),
 * and its slice digests once read whole and matching.
 */
function backupBlob(
  file: string,
  realPath: string,
  blob: { sha256: string; sizeBytes: number },
  sliceBytes: number,
): {
  readonly chunks: AsyncIterable<Buffer>;
  readonly fault: 'missing' | 'corrupt' | undefined;
  readonly refused: BackupError | undefined;
  readonly slices: SliceDigests | undefined;
} {
  let fault: 'missing' | 'corrupt' | undefined;
  let refused: BackupError | undefined;
  let slices: SliceDigests | undefined;
  async function* chunks(): AsyncGenerator<Buffer> {
    const hash = createHash('sha256');
    const sliceHasher = new SliceHasher(sliceBytes);
    let bytes = 0;
    try {
      // One byte past its size at most: a blob replaced by a link to /dev/zero is corrupt, not read without end.
      for await (const chunk of regularFileChunks(file, blob.sizeBytes + 1, realPath)) {
        hash.update(chunk);
        sliceHasher.update(chunk);
        bytes += chunk.length;
        if (bytes > blob.sizeBytes) fault = 'corrupt';
        yield chunk;
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') fault = 'missing';
      if (err instanceof BackupError) refused = err;
      throw err;
    }
    if (bytes !== blob.sizeBytes || hash.digest('hex') !== blob.sha256) fault = 'corrupt';
    else slices = sliceHasher.finish();
  }
  return {
    chunks: chunks(),
    get fault() {
      return fault;
    },
    get refused() {
      return refused;
    },
    get slices() {
      return slices;
    },
  };
}

/**
 * Puts the restore's mark into the root's storage-id, which the checks found absent (or emptied, a
 * stopped restore's): exclusively where the store can (the directory store), so that of two
 * restores that passed those checks at once only one goes on. Returns the `target_busy` error for
 * the other, which must remove nothing (all there is the winner's); undefined once the mark is in.
 */
async function claimRoot(store: OpenedArtifactStore, mark: string): Promise<BackupError | undefined> {
  const { identity } = store;
  if (!identity.claim) {
    await identity.write(mark);
    return undefined;
  }
  const outcome = await identity.claim(mark);
  if (outcome === 'replaced') return undefined;
  return lostTo(store, outcome, replacementToken(undefined), 'appeared after this restore found the root empty');
}

/** The `target_busy` of a restore that lost the root to another at the same time: it writes and removes nothing. */
async function lostTo(
  store: OpenedArtifactStore,
  outcome: Exclude<ReplaceOutcome, 'replaced'>,
  token: string,
  what: string,
): Promise<BackupError> {
  if (outcome === 'token_held')
    return new BackupError(
      'target_busy',
      `another restore is claiming the target storage root ${store.location} (${token} stands beside its storage-id); nothing was written or removed: let that one finish, or, if no restore is running, remove ${token} and run the restore again`,
    );
  const held = (await store.identity.read().catch(() => undefined))?.trim();
  return new BackupError(
    'target_busy',
    `the target storage root ${store.location} was taken by another restore at the same time (its storage-id ${what}${held ? `: ${JSON.stringify(held.slice(0, 120))}` : ''}); nothing was written or removed: let that one finish`,
  );
}

/**
 * Puts this restore's mark over the mark `stopped` of a restore stopped before its commit, exclusively
 * where the store can: two restores that both found that mark would otherwise both empty the root,
 * the later one removing blobs (and the claim) of the one already writing. Undefined once the mark is in.
 */
async function takeOverRoot(
  store: OpenedArtifactStore,
  stopped: string,
  mark: string,
): Promise<BackupError | undefined> {
  const { identity } = store;
  if (!identity.takeOver) {
    await identity.write(mark);
    return undefined;
  }
  const outcome = await identity.takeOver(stopped, mark);
  if (outcome === 'replaced') return undefined;
  return lostTo(store, outcome, replacementToken(stopped), "no longer held the stopped restore's mark it found");
}

interface Restored {
  blobs: { count: number; bytes: number };
  abortedUploads: number;
  ruleDocuments: number;
}

/** Blobs, then one transaction with the storage-id object written last; on any failure, nothing is left. */
async function restoreAllOrNothing(
  store: OpenedArtifactStore,
  options: RestoreOptions,
  manifest: SealedManifest,
  blobs: ReadonlyArray<{ sha256: string; sizeBytes: number }>,
  self: RestoreOwner,
  stoppedRestoreLeft: string | undefined,
): Promise<Restored> {
  const { pool, signal } = options;
  const file = path.join(options.backup, DATABASE_FILE);
  const mark = restoreMarker(manifest.storageId, self);
  if (stoppedRestoreLeft !== undefined) {
    // The database holds no installation (checked) and the root is marked by a restore stopped
    // before its commit: what is there is that restore's. Its mark is replaced by this one's first,
    // and kept through the emptying: this restore holds the root from here on.
    const lost = await takeOverRoot(store, stoppedRestoreLeft, mark);
    if (lost) throw lost;
    const emptied = await emptyTarget(store, mark, true);
    if (emptied.problems.length)
      throw new BackupError(
        'target_busy',
        `${store.location} holds what a restore stopped before its commit wrote, and not all of it could be removed (${emptied.problems.join('; ')}); ${whatIsLeft(emptied)}`,
      );
  } else {
    // Before the first blob: a restore stopped from here on (SIGKILL, power cut) leaves a root no
    // gateway opens and the next restore empties (identity.ts, restoreMarker). Claimed, not just
    // written: another restore into this root (with another database, so not held off by the
    // barrier) may have passed the empty-root check at the same instant, and of two plain writes both
    // would go on, each writing and committing over the other's root. Outside the rollback below: a
    // claim lost, or one that failed, leaves the root to whoever holds it (a mark of this restore
    // that landed all the same is a stopped restore's for the next run).
    const lost = await claimRoot(store, mark);
    if (lost) throw lost;
  }
  let client: pg.PoolClient | undefined;
  let undoRuleDocuments: (() => Promise<void>) | undefined;
  let committing: Restored | undefined;
  /** The storage-id was found to be no longer this restore's mark. */
  let takenOver = false;
  try {
    const sliceDigests = new Map<string, SliceDigests>();
    // Each blob read at its place, with no symbolic link below the backup's own real path.
    const realBackup = await realpath(options.backup);
    let bytes = 0;
    for (const [i, blob] of blobs.entries()) {
      signal?.throwIfAborted();
      const source = backupBlob(
        path.join(options.backup, blobRelativePath(blob.sha256)),
        path.join(realBackup, blobRelativePath(blob.sha256)),
        blob,
        options.sliceBytes ?? DEFAULT_SLICE_BYTES,
      );
      const staged = await store
        .stage(source.chunks, {
          maxBytes: Number.MAX_SAFE_INTEGER,
          expectedLength: blob.sizeBytes,
          expectedSha256: blob.sha256,
          signal,
        })
        .catch((err: unknown) => {
          // Each store wraps what its body threw in its own error (an HTTP or S3 store as a failed
          // PUT): the backup's own fault is told by what the reader saw.
          if (source.fault === 'missing') throw new BackupError('blob_missing', `the backup lacks blob ${blob.sha256}`);
          if (source.refused) throw source.refused;
          if (source.fault === 'corrupt' || (err as { code?: unknown }).code === 'invalid_request')
            throw new BackupError(
              'blob_corrupt',
              `blob ${blob.sha256} in the backup does not match its size or sha256 (${(err as Error).message})`,
            );
          throw err;
        });
      try {
        await staged.commit();
      } finally {
        // The temporary goes either way: after a commit it is a second name (or, on S3, a second copy).
        await staged.discard();
      }
      if (source.slices) sliceDigests.set(blob.sha256, source.slices);
      bytes += blob.sizeBytes;
      options.onProgress?.(i + 1, blobs.length, bytes);
    }
    signal?.throwIfAborted();
    const tx = await pool.connect();
    client = tx;
    return await inTransaction(tx, async () => {
      const abortedUploads = await loadDatabase(tx, file, manifest);
      // After the backup's own rows (a backup made before digests were recorded has none, one made
      // later may lack a blob's): every restored blob gets digests of the bytes just written.
      for (const [sha256, digests] of sliceDigests) await recordSliceDigests(tx, sha256, digests);
      const ruleDocuments = await readRuleDocuments(options.backup, manifest);
      if (Object.keys(ruleDocuments).length && options.writeRuleDocuments)
        await options.writeRuleDocuments(ruleDocuments, tx, (undo) => {
          undoRuleDocuments = undo;
        });
      // The binding, last: the row in the transaction, the object just before the commit (as a
      // writer's first start does, identity.ts).
      await tx.query('INSERT INTO arkvory_storage (id) VALUES ($1)', [manifest.storageId]);
      signal?.throwIfAborted();
      // Still this restore's root: a restore of another host takes a mark of this host for a stopped
      // restore's (it cannot tell), and writing the id over its mark would bind two databases to one root.
      const now = (await store.identity.read())?.trim();
      if (now !== mark) {
        takenOver = true;
        throw new BackupError(
          'target_busy',
          `the target storage root ${store.location} was taken over by another restore while this one ran (its storage-id now holds ${JSON.stringify((now ?? 'nothing').slice(0, 120))}; restores of other hosts take a mark of this host for a stopped restore's): this restore's transaction was rolled back and nothing in the root removed, which is the other's now`,
        );
      }
      await store.identity.write(manifest.storageId);
      committing = {
        blobs: { count: blobs.length, bytes },
        abortedUploads,
        ruleDocuments: Object.keys(ruleDocuments).length,
      };
      // inTransaction commits once this returns; a failure there is the COMMIT's (see below).
      return committing;
    });
  } catch (err) {
    if (committing) {
      // The connection failed at COMMIT: the transaction may have committed all the same. Undoing
      // the store then would leave a catalog without its blobs; so look first.
      const row = await pool
        .query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage')
        .then((r) => r.rows[0]?.id ?? null)
        .catch(() => undefined);
      // Committed, only the acknowledgement was lost: the restore is complete.
      if (row === manifest.storageId) return committing;
      if (row === undefined)
        throw new BackupError(
          'target_busy',
          `${(err as Error).message}; whether the restore's transaction committed is unknown (the database cannot be reached): if arkvory_storage holds ${manifest.storageId} the restore is complete, else drop the database and empty the storage root ${store.location} before trying again`,
          { cause: err },
        );
    }
    // inTransaction has rolled the work back (or COMMIT itself failed and nothing is left open).
    const problems: string[] = [];
    if (undoRuleDocuments)
      await undoRuleDocuments().catch((undoErr: unknown) =>
        problems.push(`rule documents: ${(undoErr as Error).message}`),
      );
    // The root was taken over (above): all there is the other restore's now, its blobs among ours.
    if (takenOver) {
      if (problems.length) (err as Error).message += `; ${problems.join('; ')}`;
      throw err;
    }
    // The mark is ours (or its write failed: then nobody else's either), so emptying writes it again
    // (over the backup's id should the restore have got that far) and removes it last.
    const emptied = await emptyTarget(store, mark);
    throw rolledBack(err, store.location, { ...emptied, problems: [...problems, ...emptied.problems] });
  } finally {
    client?.release();
  }
}

/** A backup read and checked as far as it can be without a target (checkBackup). */
export interface CheckedBackup {
  readonly backup: string;
  readonly manifest: SealedManifest;
  /** Every blob the database file references, each name a sha256. */
  readonly blobs: ReadonlyArray<{ sha256: string; sizeBytes: number }>;
}

/**
 * Reads and checks the backup `dir` without touching any target: the manifest (its own sha256, its
 * schema version against `codeSchemaVersion`), the database file (its size and sha256, every line a
 * row, every blob name a sha256) and the rule documents. A restore runs it before it starts, migrates
 * or even connects to the target database, so a refused backup leaves the target as it was. The
 * blobs are checked as they are written (a damaged one rolls the restore back).
 */
export async function checkBackup(dir: string, codeSchemaVersion: number): Promise<CheckedBackup> {
  const manifest = await openBackup(dir);
  if (manifest.schemaVersion > codeSchemaVersion) {
    throw new BackupError(
      'schema_newer',
      `the backup was made at schema version ${manifest.schemaVersion}; this code knows up to ${codeSchemaVersion}: restore with the newer code`,
    );
  }
  const blobs = await referencedBlobs(path.join(dir, DATABASE_FILE), manifest.database.bytes);
  return { backup: dir, manifest, blobs };
}

export async function runRestore(options: RestoreOptions): Promise<RestoreSummary> {
  // Every line of the database file read and every blob name checked before anything is written.
  const { manifest, blobs } =
    options.checked?.backup === options.backup
      ? options.checked
      : await checkBackup(options.backup, options.codeSchemaVersion);
  await refuseOccupiedDatabase(options.pool);
  const self = newRestoreRun();
  // The directory store before it is opened (opening a writer creates the layout).
  if (options.fsRoot !== undefined) {
    await refuseOccupiedRoot(
      createFsTree(options.fsRoot),
      options.fsRoot,
      await fsIdentityObject(options.fsRoot).read(),
      self,
    );
  }
  const store = await options.openTarget(manifest.storageId);
  try {
    // Every kind, before the first write: opening a restore target reads and writes nothing.
    const held = await store.identity.read();
    const stoppedRestoreLeft = (await refuseOccupiedRoot(store.tree, store.location, held, self))
      ? held?.trim()
      : undefined;
    if (stoppedRestoreLeft === undefined && manifest.ruleDocuments?.count && options.occupiedRuleStore) {
      const held = await options.occupiedRuleStore(await readRuleDocuments(options.backup, manifest));
      if (held !== undefined) throw new BackupError('target_not_empty', held);
    }
    const restored = await restoreAllOrNothing(store, options, manifest, blobs, self, stoppedRestoreLeft);
    const referenced = new Set(blobs.map((b) => b.sha256));
    const scrub = await scrubBlobs(store.tree, { referenced });
    return {
      backup: options.backup,
      snapshotTime: manifest.snapshotTime,
      storageId: manifest.storageId,
      tables: Object.fromEntries(manifest.tables.filter((t) => t.restored).map((t) => [t.name, t.rows])),
      ...restored,
      scrub,
    };
  } finally {
    await store.close();
  }
}
