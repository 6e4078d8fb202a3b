/** Reading a backup's `database.jsonl`: its digest, and its rows table by table. */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { BackupError } from './errors.ts';
import { fileChunks, hashStream } from './blob-copy.ts';
import type { SealedManifest } from './manifest.ts';

export interface DumpLine {
  table: string;
  row: Record<string, unknown>;
}

export async function* dumpLines(file: string): AsyncGenerator<DumpLine> {
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (line === '') continue;
    const parsed = JSON.parse(line) as Partial<DumpLine>;
    if (typeof parsed.table !== 'string' || parsed.row === null || typeof parsed.row !== 'object')
      throw new BackupError('backup_invalid', `${file} line ${n} is not a table row`);
    yield parsed as DumpLine;
  }
}

/** Throws `backup_invalid` unless the file has the size and sha256 the manifest records. */
export async function checkDatabaseFile(file: string, manifest: SealedManifest): Promise<void> {
  const seen = await hashStream(fileChunks(file)).catch((err: unknown) => {
    throw new BackupError('backup_invalid', `${file} cannot be read: ${(err as Error).message}`);
  });
  if (seen.sha256 !== manifest.database.sha256 || seen.bytes !== manifest.database.bytes) {
    throw new BackupError(
      'backup_invalid',
      `${file} does not match the manifest (sha256 ${seen.sha256}, ${seen.bytes} bytes; expected ${manifest.database.sha256}, ${manifest.database.bytes} bytes)`,
    );
  }
}

/** The blobs the backed-up catalog references, sorted. */
export async function referencedBlobs(file: string): Promise<Array<{ sha256: string; sizeBytes: number }>> {
  const blobs = new Map<string, number>();
  for await (const { table, row } of dumpLines(file)) {
    if (table === 'arkvory_artifacts') blobs.set(String(row.sha256), Number(row.size_bytes));
  }
  return [...blobs]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([sha256, sizeBytes]) => ({ sha256, sizeBytes }));
}
