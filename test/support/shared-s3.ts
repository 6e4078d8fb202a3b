/**
 * The run's S3 servers: one SeaweedFS and one MinIO for the whole `vitest run`, started by the global
 * setup (test/support/global-setup.ts) the first time a test file asks for that kind, and each test
 * file (each describe block) on a fresh bucket of its own. A server start costs SeaweedFS 10+ s and
 * its stop 10 s more; a bucket costs milliseconds.
 */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { openBucket, type S3Server, type S3ServerInfo, type S3ServerKind } from './s3-server.ts';

/** The run's `kind` server on a new, empty bucket; `destroy()` deletes the bucket. */
export async function sharedS3Bucket(kind: S3ServerKind): Promise<S3Server> {
  const res = await fetch(`${inject('s3HubUrl')}/s3/${kind}`);
  const text = await res.text();
  if (!res.ok) throw new Error(`the run's ${kind} server could not be started: ${text}`);
  const info = JSON.parse(text) as S3ServerInfo;
  return openBucket(info, `arkvory-${randomBytes(6).toString('hex')}`);
}
