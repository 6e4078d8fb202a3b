/**
 * Puts one blob into a backup directory, verified by its sha256: reused from an earlier backup at the
 * same destination (a hard link), hard-linked from the directory store when both are on one
 * filesystem (after hashing it), else copied: from the directory store's file, or through the
 * `ArtifactStore` (any other store kind).
 */
import { createHash } from 'node:crypto';
import { link, mkdir, open, realpath, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { ByteMeter } from '../byte-meter.ts';
import { BLOBS_DIR, blobRelativePath } from '../paths.ts';
import type { BlobReader, ArtifactStore } from '../store.ts';
import { BackupError } from './errors.ts';
import { regularFileChunks } from './small-file.ts';

export type BlobOutcome = 'reused' | 'linked' | 'copied';

export interface BlobSource {
  readonly store: ArtifactStore;
  /** The directory store's root, when the store is one: its blob files are read there, only as regular files. */
  readonly fsRoot?: string | undefined;
  /** Whether `fsRoot` is on the backup's filesystem: its blobs are then hard-linked (after hashing). */
  readonly linkable?: boolean | undefined;
  readonly meter?: ByteMeter | undefined;
  readonly signal?: AbortSignal | undefined;
  /** Told of an earlier backup's copy that does not match its name (it is passed over, not linked). */
  readonly onDamagedEarlier?: ((file: string) => void) | undefined;
}

const CHUNK = 1024 * 1024;

/** Splits `chunk` to the meter's quantum and waits for each slice. */
async function* paced(
  source: AsyncIterable<Buffer>,
  meter: ByteMeter | undefined,
  signal: AbortSignal | undefined,
): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    signal?.throwIfAborted();
    if (!meter) {
      yield chunk;
      continue;
    }
    for (let at = 0; at < chunk.length; at += meter.quantumBytes) {
      const slice = chunk.subarray(at, at + meter.quantumBytes);
      await meter.take(slice.length, signal);
      yield slice;
    }
  }
}

async function* readerChunks(reader: BlobReader, signal: AbortSignal): AsyncGenerator<Buffer> {
  if (reader.sizeBytes === 0) return;
  if (reader.chunks) {
    yield* reader.chunks({ start: 0, end: reader.sizeBytes - 1 }, signal);
    return;
  }
  for (let position = 0; position < reader.sizeBytes; ) {
    const buffer = Buffer.allocUnsafe(Math.min(CHUNK, reader.sizeBytes - position));
    const { bytesRead } = await reader.read(buffer, 0, buffer.length, position);
    if (bytesRead === 0) break;
    position += bytesRead;
    yield buffer.subarray(0, bytesRead);
  }
}

/** Hashes a stream; returns its sha256 and length. */
export async function hashStream(source: AsyncIterable<Buffer>): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of source) {
    hash.update(chunk);
    bytes += chunk.length;
  }
  return { sha256: hash.digest('hex'), bytes };
}

/**
 * The directory store's file of `blob`, read as a backup's blob is (small-file.ts): only a regular
 * file, opened without blocking, so a named pipe there fails the backup naming it instead of holding
 * it until a writer comes; a byte past its size at most, so a link to /dev/zero is corrupt, not read
 * without end.
 */
async function* storeFileChunks(root: string, blob: { sha256: string; sizeBytes: number }): AsyncGenerator<Buffer> {
  try {
    // At its place, as the store reads it (fs-store.ts): `blobs/` may be a link (moved to another
    // disk), a link below it is not the store's blob and would be hard-linked as a link.
    yield* regularFileChunks(
      path.join(root, blobRelativePath(blob.sha256)),
      blob.sizeBytes + 1,
      path.join(await realpath(path.join(root, BLOBS_DIR)), path.relative(BLOBS_DIR, blobRelativePath(blob.sha256))),
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new BackupError(
        'blob_missing',
        `blob ${blob.sha256} is referenced by the catalog but missing from ${root}`,
      );
    if (err instanceof BackupError && err.code === 'backup_invalid')
      throw new BackupError('blob_corrupt', `blob ${blob.sha256} in ${root}: ${err.message}`, { cause: err });
    throw err;
  }
}

async function tryLink(from: string, to: string): Promise<boolean> {
  try {
    await link(from, to);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EXDEV' || code === 'ENOENT' || code === 'EPERM' || code === 'EMLINK' || code === 'EROFS')
      return false;
    if (code === 'EEXIST') return true;
    throw err;
  }
}

export async function putBlob(
  backupDir: string,
  blob: { sha256: string; sizeBytes: number },
  earlierBackups: readonly string[],
  source: BlobSource,
): Promise<BlobOutcome> {
  const relative = blobRelativePath(blob.sha256);
  const target = path.join(backupDir, relative);
  await mkdir(path.dirname(target), { recursive: true });
  // Content-addressed: the same name in an earlier complete backup held the same bytes when it was
  // copied; hashed again before it is linked, so a copy damaged since (bit rot on the backup disk, a
  // file replaced) is copied afresh instead of spreading into every later backup.
  for (const earlier of earlierBackups) {
    const candidate = path.join(earlier, relative);
    const size = await stat(candidate).then(
      (s) => s.size,
      () => -1,
    );
    if (size !== blob.sizeBytes) continue;
    source.signal?.throwIfAborted();
    // Only a regular file, a byte past its size at most: a named pipe there is passed over, not waited on.
    // Nor a symbolic link (on its path either): linking it would copy the link, not the bytes.
    const seen = await realpath(earlier)
      .then((real) => hashStream(regularFileChunks(candidate, blob.sizeBytes + 1, path.join(real, relative))))
      .catch(() => undefined);
    if (seen === undefined) continue;
    if (seen.sha256 !== blob.sha256) {
      source.onDamagedEarlier?.(candidate);
      continue;
    }
    if (await tryLink(candidate, target)) return 'reused';
  }
  if (source.fsRoot !== undefined && source.linkable) {
    const seen = await hashStream(paced(storeFileChunks(source.fsRoot, blob), source.meter, source.signal));
    if (seen.sha256 !== blob.sha256)
      throw new BackupError(
        'blob_corrupt',
        `blob ${blob.sha256} in ${source.fsRoot} hashes to ${seen.sha256}; run \`arkvory scrub\` to quarantine it`,
      );
    if (await tryLink(path.join(source.fsRoot, relative), target)) return 'linked';
  }
  const temp = `${target}.${process.pid}.tmp`;
  const controller = new AbortController();
  const onAbort = () => controller.abort(source.signal?.reason);
  source.signal?.addEventListener('abort', onAbort, { once: true });
  let reader: BlobReader | undefined;
  const out = await open(temp, 'w', 0o644);
  try {
    let body: AsyncIterable<Buffer>;
    // The directory store's own file, not its `openBlob`: read no further than a byte past its size, its failures in backup's codes.
    if (source.fsRoot !== undefined) body = storeFileChunks(source.fsRoot, blob);
    else {
      reader = await source.store.openBlob(blob.sha256).catch((err: unknown) => {
        if ((err as { code?: string }).code === 'not_found')
          throw new BackupError(
            'blob_missing',
            `blob ${blob.sha256} is referenced by the catalog but missing from ${source.store.location}`,
          );
        throw err;
      });
      body = readerChunks(reader, controller.signal);
    }
    const hash = createHash('sha256');
    for await (const chunk of paced(body, source.meter, source.signal)) {
      hash.update(chunk);
      await out.write(chunk);
    }
    await out.sync();
    const actual = hash.digest('hex');
    if (actual !== blob.sha256)
      throw new BackupError(
        'blob_corrupt',
        `blob ${blob.sha256} in ${source.store.location} hashes to ${actual}; run \`arkvory scrub\` to quarantine it`,
      );
    await out.close();
    await rename(temp, target);
    return 'copied';
  } catch (err) {
    await out.close().catch(() => {});
    await rm(temp, { force: true });
    throw err;
  } finally {
    source.signal?.removeEventListener('abort', onAbort);
    await reader?.close().catch(() => {});
  }
}
