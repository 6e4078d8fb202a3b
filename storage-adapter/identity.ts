/**
 * Binds a storage root to a database: `<root>/storage-id` (a file, or an object on the static-HTTP
 * store) and the single `arkvory_storage` row hold
 * the same UUID. The writer creates both on first start; every later start (and every reader)
 * only checks that they agree and refuses with `storage_mismatch` otherwise.
 */
import { createHash, randomUUID } from 'node:crypto';
import { link, open, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import type pg from 'pg';
import { StorageError } from './errors.ts';
import { resolveInsideRoot, STORAGE_ID_FILE } from './paths.ts';
import { fsyncDirectory } from '../lib/fs-sync.ts';
import { withTransaction } from '../lib/transaction.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export type StorageRole = 'writer' | 'reader';

/**
 * What a restore puts in `storage-id` before its first blob and replaces with the backup's id just
 * before its commit: a root a restore stopped part-way (SIGKILL, power cut) is never opened as an
 * installation, and the next restore into it knows everything there is the stopped one's.
 */
const RESTORING = 'restoring ';

/** The process writing a restore: the host as it names itself in file names, and its pid there. */
export interface RestoreOwner {
  readonly host: string;
  readonly pid: number;
  /**
   * Random per restore run: no two marks are the same text, even of two runs with one pid (every
   * run of a container is pid 1), so taking over a mark (`takeOver`) is taking over that run's.
   */
  readonly run?: string | undefined;
}

/**
 * `restoring <id> <host> <pid> <run>`: the owner tells a restore still running (on this host: its pid is
 * alive) from one stopped before its commit, whose leftovers the next restore empties.
 */
export const restoreMarker = (id: string, owner: RestoreOwner): string =>
  `${RESTORING}${id} ${owner.host} ${owner.pid}${owner.run === undefined ? '' : ` ${owner.run}`}`;
export const isRestoreMarker = (text: string | undefined): boolean => text?.trim().startsWith(RESTORING) === true;

/** The owner a restore mark names; undefined for a mark written before marks named one. Pure. */
export function restoreMarkOwner(text: string | undefined): RestoreOwner | undefined {
  const match = /^restoring \S+ ([A-Za-z0-9._-]+) (\d+)(?: ([0-9a-f-]{1,64}))?$/.exec(text?.trim() ?? '');
  return match ? { host: match[1]!, pid: Number(match[2]), run: match[3] } : undefined;
}

/**
 * The token a replacement of the storage-id holding `from` (undefined: none) takes first: one name
 * per text replaced, so of two restores replacing the same text, only one creates it.
 */
export const replacementToken = (from: string | undefined): string =>
  `${STORAGE_ID_FILE}.replacing.${createHash('sha256')
    .update(from === undefined ? '' : `=${from.trim()}`)
    .digest('hex')
    .slice(0, 32)}`;

/** How a store creates a token object only if it does not exist (false: it does), and removes it. */
export interface ExclusiveTokens {
  create(name: string, text: string): Promise<boolean>;
  remove(name: string): Promise<void>;
}

/**
 * What an exclusive write of the storage-id did: `replaced`; `changed` (the object no longer held
 * what the caller found: another restore's claim came first; nothing written); `token_held` (the
 * object still holds it, but another replacement's token stands: one running now, or one killed
 * between creating and removing it; nothing written).
 */
export type ReplaceOutcome = 'replaced' | 'changed' | 'token_held';

/**
 * Writes `text` into `object` only if it still holds `from` (undefined: does not exist), and only one
 * of several callers replacing the same `from` at once does: each first creates the token of `from`
 * exclusively, checks the object under it, writes and removes the token. A caller that comes once
 * the token is removed finds the object changed. Never two go on: a token left by a caller killed
 * between its creation and its removal makes every later replacement of the same text `token_held`.
 */
export async function replaceExclusively(
  object: Pick<IdentityObject, 'read' | 'write'>,
  tokens: ExclusiveTokens,
  from: string | undefined,
  text: string,
): Promise<ReplaceOutcome> {
  const name = replacementToken(from);
  if (!(await tokens.create(name, text)))
    return (await object.read())?.trim() === from?.trim() ? 'token_held' : 'changed';
  try {
    if ((await object.read())?.trim() !== from?.trim()) return 'changed';
    await object.write(text);
    return 'replaced';
  } finally {
    // A token left behind once the object changed is only litter: its text is never held again.
    await tokens.remove(name).catch(() => {});
  }
}

/** Where a store keeps its `storage-id`: a file in the root, or an object on the static-HTTP store. */
export interface IdentityObject {
  /** The store root (a directory or a base URL), for messages. */
  readonly root: string;
  /** The full name of the object, for messages. */
  readonly name: string;
  /** The variable that points at the store, named in the fix. */
  readonly variable: string;
  /** The raw text, or undefined when the object does not exist. */
  read(): Promise<string | undefined>;
  /** Writes the object atomically. */
  write(id: string): Promise<void>;
  /**
   * Creates the object holding `text` only if it does not exist, no other claim coming between:
   * `changed` (nothing written) when it exists. Where a store has no such step, absent.
   */
  claim?(text: string): Promise<ReplaceOutcome>;
  /**
   * Replaces the object's text `from` (a stopped restore's mark) with `text`, unless another
   * replacement of `from` came first or the object no longer holds it (nothing written then).
   */
  takeOver?(from: string, text: string): Promise<ReplaceOutcome>;
}

async function readStorageId(object: IdentityObject): Promise<string | undefined> {
  const text = await object.read();
  if (text === undefined) return undefined;
  const id = text.trim();
  if (isRestoreMarker(id))
    throw new StorageError(
      'storage_mismatch',
      `${object.name} marks a restore that did not finish (stopped before its commit): ${object.root} holds part of a backup and no installation; run the same \`arkvory restore\` again (it removes what the stopped one wrote first) or empty the root`,
    );
  if (!UUID.test(id))
    throw new StorageError(
      'storage_mismatch',
      `${object.name} does not hold a storage UUID (found ${JSON.stringify(id.slice(0, 60))}); restore the right object or the right ${object.variable}`,
    );
  return id;
}

async function readStorageIdRow(pool: pg.Pool): Promise<string | undefined> {
  const { rows } = await pool.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage');
  return rows[0]?.id;
}

/** Writes `storage-id` atomically: temp file, fsync, rename, fsync of the root. */
async function writeStorageIdFile(root: string, id: string): Promise<void> {
  const file = resolveInsideRoot(root, STORAGE_ID_FILE);
  const temp = resolveInsideRoot(root, `${STORAGE_ID_FILE}.${process.pid}.tmp`);
  const handle = await open(temp, 'w', 0o644);
  try {
    await handle.writeFile(`${id}\n`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(temp, file);
  await fsyncDirectory(root);
}

/**
 * Creates `storage-id` holding `text` unless it exists: a temp file (fsynced) hard-linked to the name,
 * which link(2) refuses (EEXIST) when the name is taken, then the root fsynced. A rename would
 * replace a storage-id another process wrote meanwhile. False when the name was taken.
 */
async function claimStorageIdFile(root: string, text: string): Promise<ReplaceOutcome> {
  const file = resolveInsideRoot(root, STORAGE_ID_FILE);
  // Unique per call: two claims of one process (or of two with the same pid in containers) never share it.
  const temp = resolveInsideRoot(root, `${STORAGE_ID_FILE}.${process.pid}.${randomUUID()}.claim`);
  const handle = await open(temp, 'wx', 0o644);
  try {
    try {
      await handle.writeFile(`${text}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await link(temp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return 'changed';
    throw err;
  } finally {
    await unlink(temp).catch(() => {});
  }
  await fsyncDirectory(root);
  return 'replaced';
}

/** Token files beside `<root>/storage-id`, created with O_EXCL. */
function fsTokens(root: string): ExclusiveTokens {
  return {
    async create(name, text) {
      try {
        await writeFile(resolveInsideRoot(root, name), `${text}\n`, { flag: 'wx', mode: 0o644 });
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
        throw err;
      }
    },
    remove: (name) => rm(resolveInsideRoot(root, name), { force: true }),
  };
}

/** `<root>/storage-id` of the filesystem store. */
export function fsIdentityObject(root: string): IdentityObject {
  const file = resolveInsideRoot(root, STORAGE_ID_FILE);
  const object: IdentityObject = {
    root,
    name: file,
    variable: 'ARKVORY_DATA_DIR',
    async read() {
      try {
        return await readFile(file, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
    },
    write: (id) => writeStorageIdFile(root, id),
    claim: (text) => claimStorageIdFile(root, text),
    takeOver: (from, text) => replaceExclusively(object, fsTokens(root), from, text),
  };
  return object;
}

/** The filesystem form: binds `<root>/storage-id`. */
export function ensureStorageIdentity(options: { root: string; role: StorageRole; pool: pg.Pool }): Promise<string> {
  return ensureStorageIdentityOf({ object: fsIdentityObject(options.root), role: options.role, pool: options.pool });
}

/**
 * The storage id a store opens with. A restore target takes the backup's id and reads or writes no
 * binding (restore writes it last, backup/restore.ts); any other store checks the binding, as a
 * writer (creating a fresh pair) or, for readers and workers, as a reader.
 */
export function openingStorageId(options: {
  object: IdentityObject;
  role: StorageRole | 'worker';
  pool: pg.Pool;
  restoreAs?: string | undefined;
}): Promise<string> {
  const { object, role, pool, restoreAs } = options;
  if (restoreAs !== undefined) {
    if (role !== 'writer') return Promise.reject(new Error('restoreAs needs the writer role'));
    return Promise.resolve(restoreAs);
  }
  return ensureStorageIdentityOf({ object, role: role === 'writer' ? 'writer' : 'reader', pool });
}

/**
 * Returns the storage id after checking (reader) or creating-then-checking (writer) the binding.
 * A fresh pair (no file, no row) is created only by the writer, with a random id; every other
 * disagreement refuses. (A restore recreates the backed-up id itself, last: see backup/restore.ts.)
 */
export async function ensureStorageIdentityOf(options: {
  object: IdentityObject;
  role: StorageRole;
  pool: pg.Pool;
}): Promise<string> {
  const { object, role, pool } = options;
  const root = object.root;
  const fileId = await readStorageId(object);
  const rowId = await readStorageIdRow(pool);
  if (fileId === undefined && rowId === undefined) {
    if (role === 'reader') {
      throw new StorageError(
        'storage_mismatch',
        `the storage root ${root} is not initialised (no ${STORAGE_ID_FILE}, no arkvory_storage row); start the writer (ARKVORY_ROLE=api) first`,
      );
    }
    const id = randomUUID();
    // Row first inside a transaction, file before commit: a crash in between leaves a file without
    // a row, which the next start reports instead of silently binding a second database.
    await withTransaction(pool, async (client) => {
      const inserted = await client.query(
        'INSERT INTO arkvory_storage (id) VALUES ($1) ON CONFLICT (singleton) DO NOTHING',
        [id],
      );
      if (inserted.rowCount === 1) await object.write(id);
    });
    return ensureStorageIdentityOf({ object, role: 'reader', pool });
  }
  if (fileId === undefined) {
    throw new StorageError(
      'storage_mismatch',
      `the database is bound to storage ${rowId} but ${root} has no ${STORAGE_ID_FILE}; point ${object.variable} at that storage root`,
    );
  }
  if (rowId === undefined) {
    throw new StorageError(
      'storage_mismatch',
      `${object.name} says storage ${fileId} but the database has no arkvory_storage row; point ARKVORY_DATABASE_URL at the database of this storage root`,
    );
  }
  if (rowId !== fileId) {
    throw new StorageError(
      'storage_mismatch',
      `${object.name} says storage ${fileId} but the database is bound to storage ${rowId}; the root and the database belong to different installations`,
    );
  }
  return fileId;
}
