/**
 * Multipart sessions assembled on the S3 server: each part read once (its sha256 re-checked, the
 * whole's computed) and copied server-side with UploadPartCopy, tied to the bytes just read by the
 * part's ETag (`x-amz-copy-source-if-match`); the upload is completed only after every check passed,
 * and aborted on any failure. `declined` when S3 cannot do it (parts below its 5 MiB minimum, too
 * many ranges, or a server without UploadPartCopy): the worker then streams the parts.
 */
import { createHash } from 'node:crypto';
import { StorageError } from '../errors.ts';
import { upstreamError } from '../streaming/http-upstream.ts';
import { sessionRelativeDir } from '../paths.ts';
import { abortMultipart, completeMultipart, createMultipart, planPartCopies, uploadPartCopy } from './s3-transfer.ts';
import type { S3Bucket } from './s3-tree.ts';
import type { AssemblyPart, StageOptions } from '../store.ts';
import { SliceHasher, type SliceDigests } from '../slice-digests.ts';
import { partGrown } from '../part-reads.ts';

export type Assembly =
  | { sha256: string; sizeBytes: number; sliceDigests: SliceDigests | undefined; etag: string | undefined }
  | 'declined';

/** Assembles the session's parts as the object `target` (a key); on failure nothing is left open. */
export async function assembleOnServer(
  bucket: S3Bucket,
  sessionId: string,
  parts: readonly AssemblyPart[],
  target: string,
  stageOptions: StageOptions,
): Promise<Assembly> {
  const { client, keyOf } = bucket;
  const copies = planPartCopies(
    parts.map((p) => p.sizeBytes),
    bucket.limits.copyBytes,
  );
  if (!copies) return 'declined';
  const uploadId = await createMultipart(client, target);
  const whole = createHash('sha256');
  const slices = stageOptions.sliceBytes !== undefined ? new SliceHasher(stageOptions.sliceBytes) : undefined;
  let sizeBytes = 0;
  let previous: Promise<unknown> = Promise.resolve();
  const etags: string[] = new Array(copies.length);
  let notImplemented = false;
  try {
    for (const [index, part] of parts.entries()) {
      const source = keyOf(`${sessionRelativeDir(sessionId)}/${part.fileName}`);
      // The one read of the bytes: each part's sha256 is re-checked and the whole's computed.
      const res = await client.request({
        method: 'GET',
        key: source,
        signal: stageOptions.signal,
        highWaterMark: 256 * 1024,
      });
      if (res.statusCode !== 200) throw await client.failure(res, `GET ${source}`);
      const etag = res.headers.etag;
      const hash = createHash('sha256');
      let partBytes = 0;
      try {
        for await (const chunk of res.body) {
          partBytes += (chunk as Buffer).length;
          // A part grown on the store (replaced by a larger object) is not read on to its end.
          if (partBytes > part.sizeBytes) throw partGrown(part);
          hash.update(chunk as Buffer);
          whole.update(chunk as Buffer);
          slices?.update(chunk as Buffer);
        }
      } catch (err) {
        throw upstreamError(err, `GET ${source}`);
      }
      if (partBytes !== part.sizeBytes || hash.digest('hex') !== part.sha256)
        throw new StorageError('part_mismatch', `part ${part.partNumber} changed on the store after it was received`);
      sizeBytes += partBytes;
      // Its copies may run while the next part is read; the ETag ties them to the bytes just hashed.
      await previous;
      if (notImplemented) break;
      previous = (async () => {
        for (const [n, copy] of copies.entries()) {
          if (copy.source !== index) continue;
          const got = await uploadPartCopy(
            client,
            source,
            target,
            uploadId,
            n + 1,
            copy,
            typeof etag === 'string' ? etag : undefined,
          );
          if (got === 'not-implemented') {
            notImplemented = true;
            return;
          }
          etags[n] = got;
        }
      })();
      // Awaited at the next part or after the last: a copy failing meanwhile, while the next part is
      // read, would otherwise be an unhandled rejection, which ends the process (the writer too).
      previous.catch(() => {});
    }
    await previous;
    if (notImplemented) {
      await abortMultipart(client, target, uploadId).catch(() => {});
      return 'declined';
    }
    const sha256 = whole.digest('hex');
    if (stageOptions.expectedLength !== undefined && sizeBytes !== stageOptions.expectedLength)
      throw new StorageError(
        'invalid_request',
        `The parts have ${sizeBytes} bytes; the session expects ${stageOptions.expectedLength}.`,
      );
    if (stageOptions.expectedSha256 !== undefined && stageOptions.expectedSha256 !== sha256)
      throw new StorageError('invalid_request', "The assembled parts do not match the session's sha256.");
    // Only now, every check passed, does the object come into existence. A completion answered
    // without an ETag throws (completeMultipart): under a blob name nothing checks it again, and the
    // HEAD below would take a same-size object already there (damaged, planted) for the assembly.
    const completed = await completeMultipart(client, target, uploadId, etags);
    const head = await client.head(target);
    if (head?.sizeBytes !== sizeBytes)
      throw new StorageError(
        'upstream_unreachable',
        `The S3 server assembled ${target} with ${head?.sizeBytes ?? 'no'} bytes, not ${sizeBytes}.`,
      );
    return { sha256, sizeBytes, sliceDigests: slices?.finish(), etag: head.etag ?? completed };
  } catch (err) {
    await previous.catch(() => {});
    await abortMultipart(client, target, uploadId).catch(() => {});
    throw err;
  }
}
