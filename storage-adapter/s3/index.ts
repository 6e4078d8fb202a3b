/** The S3-compatible store (SeaweedFS, MinIO, AWS): signed requests over undici and raw sockets. */
export { createS3Client, s3ErrorOf, type S3Client, type S3ClientOptions } from './s3-client.ts';
export { parseS3Url, type S3Location } from './s3-location.ts';
export { openS3Store, readS3StorageIdObject, type S3Store, type S3StoreOptions } from './s3-store.ts';
export { copyObject, S3_DEFAULT_LIMITS, type S3Limits } from './s3-transfer.ts';
