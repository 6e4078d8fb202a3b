/**
 * The ArtifactStore conformance suite (artifact-store.ts) on every store kind of the one list
 * (test/support/store-kinds.ts): a directory, nginx WebDAV, SeaweedFS and MinIO. Each kind's server
 * starts once for the file (the S3 kinds are the run's shared servers, on a bucket of this file's own).
 */
import { STORE_KINDS, startStoreBacking } from '../support/store-kinds.ts';
import { artifactStoreConformance } from './artifact-store.ts';

for (const entry of STORE_KINDS) artifactStoreConformance(entry, () => startStoreBacking(entry.kind));
