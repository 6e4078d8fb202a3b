/**
 * Second keys on the run's S3 servers, for key rotation tests, made with what each server offers
 * without its admin API: SeaweedFS's second identity (read and list only) from the `s3.json` the
 * server starts with (s3-server.ts); MinIO's temporary credentials from its STS `AssumeRole`, signed
 * with the root key, narrowed by a session policy to one bucket, read-only or not.
 */
import aws4 from 'aws4';
import { SEAWEEDFS_READ_KEY, type S3ServerInfo } from './s3-server.ts';

export interface S3Key {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string | undefined;
}

/** Temporary MinIO credentials for `bucket` (an hour): all of S3 on it, or only reading it. */
export async function minioTemporaryKey(info: S3ServerInfo, bucket: string, access: 'full' | 'read'): Promise<S3Key> {
  const actions = access === 'full' ? ['s3:*'] : ['s3:GetObject', 's3:ListBucket', 's3:GetBucketLocation'];
  const policy = {
    Version: '2012-10-17',
    Statement: [{ Effect: 'Allow', Action: actions, Resource: [`arn:aws:s3:::${bucket}`, `arn:aws:s3:::${bucket}/*`] }],
  };
  const body = new URLSearchParams({
    Action: 'AssumeRole',
    Version: '2011-06-15',
    DurationSeconds: '3600',
    Policy: JSON.stringify(policy),
  }).toString();
  const url = new URL(info.endpoint);
  const signed = aws4.sign(
    {
      service: 'sts',
      region: info.region,
      method: 'POST',
      host: url.host,
      path: '/',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body,
    },
    { accessKeyId: info.accessKeyId, secretAccessKey: info.secretAccessKey },
  );
  const res = await fetch(`${info.endpoint}/`, {
    method: 'POST',
    headers: signed.headers as Record<string, string>,
    body,
  });
  const text = await res.text();
  const field = (name: string) => new RegExp(`<${name}>([^<]+)</${name}>`).exec(text)?.[1];
  const accessKeyId = field('AccessKeyId');
  const secretAccessKey = field('SecretAccessKey');
  const sessionToken = field('SessionToken');
  if (res.status !== 200 || !accessKeyId || !secretAccessKey || !sessionToken)
    throw new Error(`MinIO AssumeRole answered ${res.status}: ${text.slice(0, 500)}`);
  return { accessKeyId, secretAccessKey, sessionToken };
}

/** A key of the server that may read `bucket` but not write it. */
export async function readOnlyKey(info: S3ServerInfo, bucket: string): Promise<S3Key> {
  return info.kind === 'seaweedfs' ? SEAWEEDFS_READ_KEY : minioTemporaryKey(info, bucket, 'read');
}
