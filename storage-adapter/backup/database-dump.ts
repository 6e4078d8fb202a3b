/**
 * Reads every Arkvory table in one REPEATABLE READ snapshot into a JSON-lines file
 * (`{"table": …, "row": …}` per row, tables in restore order), and the blobs that snapshot references.
 * Tables are found in the catalog, so tables added by later migrations are backed up too.
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import type pg from 'pg';
import { MIGRATIONS_TABLE, RECORD_ONLY_TABLES, type TableEntry } from './manifest.ts';
import { tablesInDependencyOrder } from './table-order.ts';
import { inTransaction } from '../../lib/transaction.ts';

const FETCH_ROWS = 500;

export interface DatabaseDump {
  snapshotTime: string;
  schemaVersion: number;
  storageId: string;
  tables: TableEntry[];
  bytes: number;
  sha256: string;
  /** Every blob a catalog row of the snapshot references, sorted by sha256. */
  blobs: Array<{ sha256: string; sizeBytes: number }>;
}

export async function arkvoryTables(client: pg.ClientBase): Promise<string[]> {
  const { rows } = await client.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname LIKE 'arkvory\\_%' AND c.relname <> $1`,
    [MIGRATIONS_TABLE],
  );
  const refs = await client.query<{ child: string; parent: string }>(
    `SELECT cl.relname AS child, pl.relname AS parent FROM pg_constraint k
       JOIN pg_class cl ON cl.oid = k.conrelid JOIN pg_class pl ON pl.oid = k.confrelid
      WHERE k.contype = 'f' AND k.connamespace = current_schema()::regnamespace`,
  );
  return tablesInDependencyOrder(
    rows.map((r) => r.name),
    refs.rows,
  );
}

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** Writes the dump to `file` (created, fsynced); the snapshot is released before it returns. */
export async function dumpDatabase(pool: pg.Pool, file: string, signal?: AbortSignal): Promise<DatabaseDump> {
  // The file first: a file that cannot be made (no descriptors, no inodes) must not leave a
  // pooled connection checked out, which would keep pool.end() from ever returning.
  const out = await open(file, 'wx', 0o600);
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (err) {
    await out.close();
    throw err;
  }
  const hash = createHash('sha256');
  let bytes = 0;
  const write = async (text: string) => {
    const data = Buffer.from(text);
    hash.update(data);
    bytes += data.length;
    await out.write(data);
  };
  try {
    const snapshot = await inTransaction(
      client,
      async () => {
        // The first query fixes the snapshot; now() is that transaction's start.
        const head = await client.query<{ t: string; v: number | null }>(
          `SELECT to_json(now())#>>'{}' AS t, (SELECT max(version) FROM ${MIGRATIONS_TABLE}) AS v`,
        );
        const storage = await client.query<{ id: string }>('SELECT id::text AS id FROM arkvory_storage');
        const tables: TableEntry[] = [];
        for (const table of await arkvoryTables(client)) {
          signal?.throwIfAborted();
          await client.query(
            `DECLARE dump NO SCROLL CURSOR FOR SELECT to_jsonb(t)::text AS row FROM ${quoteIdent(table)} t`,
          );
          let rows = 0;
          for (;;) {
            // Within a table too: a catalog of millions of rows takes minutes to read.
            signal?.throwIfAborted();
            const batch = await client.query<{ row: string }>(`FETCH ${FETCH_ROWS} FROM dump`);
            if (!batch.rows.length) break;
            await write(batch.rows.map((r) => `{"table":${JSON.stringify(table)},"row":${r.row}}\n`).join(''));
            rows += batch.rows.length;
          }
          await client.query('CLOSE dump');
          tables.push({ name: table, rows, restored: !RECORD_ONLY_TABLES.has(table) });
        }
        const blobs = await client.query<{ sha256: string; size: string }>(
          'SELECT sha256, max(size_bytes)::text AS size FROM arkvory_artifacts GROUP BY sha256 ORDER BY sha256',
        );
        return { head, storage, tables, blobs };
      },
      { begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' },
    );
    const { head, storage, tables, blobs } = snapshot;
    await out.sync();
    return {
      snapshotTime: head.rows[0]!.t,
      schemaVersion: head.rows[0]!.v ?? 0,
      storageId: storage.rows[0]?.id ?? '',
      tables,
      bytes,
      sha256: hash.digest('hex'),
      blobs: blobs.rows.map((r) => ({ sha256: r.sha256, sizeBytes: Number(r.size) })),
    };
  } finally {
    await out.close();
    client.release();
  }
}
