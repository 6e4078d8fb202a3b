/**
 * Every store the suites run over, in ONE list: the directory store, the static-HTTP store (a real
 * nginx with WebDAV) and the S3 store on each real S3 server. Any suite that covers several stores
 * takes its kinds from `STORE_KINDS` (or a filter of it); what a kind legitimately cannot do is a
 * capability flag here, and a suite declares the sections needing it only for the kinds that have it.
 * A backing starts what the kind needs and gives a probe that looks at the store's objects from
 * outside the store under test: the directory itself (fs, and nginx's root), or raw signed S3 requests.
 */
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { onFileEnd } from './file-end.ts';
import { openFsStore } from '../../storage-adapter/fs/index.ts';
import { openHttpStore } from '../../storage-adapter/http/index.ts';
import { openS3Store, type S3Store, type S3Limits } from '../../storage-adapter/s3/index.ts';
import type { ArtifactStore, OpenedArtifactStore } from '../../storage-adapter/store.ts';
import { makeTempDir } from './gateway.ts';
import { emptyBucket, listKeys, type S3Server, type S3ServerKind } from './s3-server.ts';
import { sharedS3Bucket } from './shared-s3.ts';
import { startStaticStore, type StaticStore } from './static-store.ts';

export type StoreKind = 'fs' | 'http' | S3ServerKind;

/** What a store kind can do beyond what every `ArtifactStore` must (test/conformance/artifact-store.ts). */
export interface StoreCapabilities {
  /**
   * `ArtifactStore.assembleParts`: the store puts a multipart session's parts together itself
   * (S3 UploadPartCopy), so the parts' bytes never pass through the gateway again. The others
   * stream the parts through `stage()`.
   */
  readonly serverSideAssembly: boolean;
  /**
   * `StageOptions.chunksOwned` on a body of undeclared length: the store frees each chunk's memory
   * once written (the directory store's overlapped writer). The S3 store frees them only on a
   * single PUT of a declared length (storage-adapter/s3/s3-store.int.test.ts); nginx never.
   */
  readonly freesOwnedChunks: boolean;
}

export interface StoreKindEntry {
  readonly kind: StoreKind;
  /** What runs behind it, for test names. */
  readonly server: string;
  readonly capabilities: StoreCapabilities;
}

export const STORE_KINDS: readonly StoreKindEntry[] = [
  { kind: 'fs', server: 'a directory', capabilities: { serverSideAssembly: false, freesOwnedChunks: true } },
  { kind: 'http', server: 'nginx WebDAV', capabilities: { serverSideAssembly: false, freesOwnedChunks: false } },
  { kind: 'seaweedfs', server: 'SeaweedFS', capabilities: { serverSideAssembly: true, freesOwnedChunks: false } },
  { kind: 'minio', server: 'MinIO', capabilities: { serverSideAssembly: true, freesOwnedChunks: false } },
];
export const isS3Kind = (kind: StoreKind): kind is S3ServerKind => kind === 'seaweedfs' || kind === 'minio';
export const ALL_STORE_KINDS: readonly StoreKind[] = STORE_KINDS.map((entry) => entry.kind);
/** The S3 store's kinds: one per real S3 server. */
export const S3_STORE_KINDS: readonly S3ServerKind[] = ALL_STORE_KINDS.filter(isS3Kind);
/** The kinds a gateway reaches without a bucket (the directory and nginx). */
export const FILE_STORE_KINDS: readonly StoreKind[] = ALL_STORE_KINDS.filter((kind) => !isS3Kind(kind));

/** A store's objects by relative name (`tmp/…`, `blobs/sha256/…`), seen from outside. */
export interface StoreProbe {
  read(relative: string): Promise<Buffer | undefined>;
  write(relative: string, bytes: Buffer | string): Promise<void>;
  /** Names directly under `dir` (`''`: the root; objects and "directories"), sorted; [] when there are none. */
  list(dir: string): Promise<string[]>;
  /** Every file (object) under `dir` at any depth, relative to `dir`, sorted; directories left empty are not files. */
  files(dir: string): Promise<string[]>;
}

export function directoryProbe(root: string): StoreProbe {
  return {
    read: (relative) =>
      readFile(path.join(root, relative)).catch((err: NodeJS.ErrnoException) =>
        err.code === 'ENOENT' ? undefined : Promise.reject(err),
      ),
    async write(relative, bytes) {
      await mkdir(path.dirname(path.join(root, relative)), { recursive: true });
      await writeFile(path.join(root, relative), bytes);
    },
    list: async (dir) =>
      (
        await readdir(path.join(root, dir)).catch((err: NodeJS.ErrnoException) =>
          err.code === 'ENOENT' ? [] : Promise.reject(err),
        )
      ).sort(),
    async files(dir) {
      const base = path.join(root, dir);
      const entries = await readdir(base, { recursive: true, withFileTypes: true }).catch(
        (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? [] : Promise.reject(err)),
      );
      return entries
        .filter((e) => e.isFile())
        .map((e) => path.relative(base, path.join(e.parentPath, e.name)))
        .sort();
    },
  };
}

/** Where a test's S3 store lives and how it is reached, with the bounds every test store uses. */
function s3Connection(s3: S3Server, prefix: string) {
  return {
    location: { bucket: s3.bucket, prefix },
    endpoint: s3.env().ARKVORY_S3_ENDPOINT!,
    region: s3.region,
    credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
    connectTimeoutMs: 2000,
    timeoutMs: 30_000,
  };
}

export function s3Probe(server: S3Server, prefix = ''): StoreProbe {
  const client = server.client();
  return {
    async read(relative) {
      const res = await client.request({ method: 'GET', key: `${prefix}${relative}` });
      if (res.statusCode === 404) {
        await res.body.dump();
        return undefined;
      }
      if (res.statusCode !== 200) throw await client.failure(res, `GET ${relative}`);
      return Buffer.from(await res.body.arrayBuffer());
    },
    async write(relative, bytes) {
      await client.expectOk(
        { method: 'PUT', key: `${prefix}${relative}`, body: Buffer.from(bytes) },
        `PUT ${relative}`,
      );
    },
    async list(dir) {
      const base = dir ? `${prefix}${dir}/` : prefix;
      const names = new Set<string>();
      for (const key of await listKeys(server, base)) names.add(key.slice(base.length).split('/')[0]!);
      return [...names].sort();
    },
    async files(dir) {
      const base = dir ? `${prefix}${dir}/` : prefix;
      return (await listKeys(server, base)).map((key) => key.slice(base.length));
    },
  };
}

export interface StoreBacking {
  readonly kind: StoreKind;
  /** The gateway's storage variables (none for fs: the gateway's own data dir). */
  readonly env: Record<string, string>;
  readonly nginx?: StaticStore | undefined;
  readonly s3?: S3Server | undefined;
  /** fs: the store root is `dataDir` (the gateway's); the others ignore it. */
  probe(dataDir?: string): StoreProbe;
  /**
   * A store at `place`, a name of the backing's own choosing: fs a directory under one temp root, http
   * a path under nginx's root, S3 a key prefix of the bucket. Opened again at the same place, it is the
   * same store; another place is another, empty store of the same kind.
   */
  openAt(
    place: string,
    role: 'writer' | 'reader' | 'worker',
    pool: pg.Pool,
    options?: { restoreAs?: string },
  ): Promise<OpenedArtifactStore>;
  /** The objects of the store at `place`, seen from outside. */
  probeAt(place: string): StoreProbe;
  /** Opens the store directly (store-level tests); fs in a fresh temp root unless `dataDir` is given. */
  open(
    role: 'writer' | 'reader' | 'worker',
    pool: pg.Pool,
    options?: { dataDir?: string; limits?: Partial<S3Limits>; socketReads?: boolean; socketWrites?: boolean },
  ): Promise<ArtifactStore>;
  /** Empties the store and every place (between tests sharing one backing). */
  reset(dataDir?: string): Promise<void>;
  stop(): Promise<void>;
}

const backings = new Set<StoreBacking>();
onFileEnd(async () => {
  for (const b of [...backings]) await b.stop();
});

/**
 * Starts what `kind` needs; stopped by `stop()` or when the test file ends. An S3 kind is a fresh
 * bucket on the run's shared server of that kind (test/support/shared-s3.ts), deleted by `stop()`.
 */
export async function startStoreBacking(kind: StoreKind): Promise<StoreBacking> {
  const nginx = kind === 'http' ? await startStaticStore() : undefined;
  const s3 = isS3Kind(kind) ? await sharedS3Bucket(kind) : undefined;
  let lastFsRoot: string | undefined;
  const placesRoot = kind === 'fs' ? await makeTempDir('arkvory-places-') : undefined;
  const opened: ArtifactStore[] = [];
  const track = <T extends ArtifactStore>(store: T): T => {
    opened.push(store);
    return store;
  };
  const backing: StoreBacking = {
    kind,
    env: nginx ? { ARKVORY_STORAGE_URL: nginx.url } : s3 ? s3.env() : {},
    nginx,
    s3,
    probe(dataDir) {
      if (s3) return s3Probe(s3);
      const root = nginx?.root ?? dataDir ?? lastFsRoot;
      if (!root) throw new Error('the fs probe needs the store root (the gateway data dir)');
      return directoryProbe(root);
    },
    async openAt(place, role, pool, options = {}) {
      if (s3) {
        return track(await openS3Store({ ...s3Connection(s3, `${place}/`), role, pool, restoreAs: options.restoreAs }));
      }
      if (nginx)
        return track(
          await openHttpStore({
            url: `${nginx.url}${place}/`,
            role,
            pool,
            connectTimeoutMs: 2000,
            timeoutMs: 10_000,
            restoreAs: options.restoreAs,
          }),
        );
      return track(
        await openFsStore({ root: path.join(placesRoot!, place), role, pool, restoreAs: options.restoreAs }),
      );
    },
    probeAt(place) {
      if (s3) return s3Probe(s3, `${place}/`);
      return directoryProbe(path.join(nginx?.root ?? placesRoot!, place));
    },
    async open(role, pool, options = {}) {
      let store: ArtifactStore;
      if (s3) {
        store = await openS3Store({
          ...s3Connection(s3, ''),
          role,
          pool,
          limits: options.limits,
          socketReads: options.socketReads,
          socketWrites: options.socketWrites,
        });
      } else if (nginx) {
        store = await openHttpStore({ url: nginx.url, role, pool, connectTimeoutMs: 2000, timeoutMs: 10_000 });
      } else {
        lastFsRoot = options.dataDir ?? (await makeTempDir('arkvory-store-'));
        store = await openFsStore({ root: lastFsRoot, role, pool });
      }
      return track(store);
    },
    async reset(dataDir) {
      if (s3) await emptyBucket(s3);
      for (const root of [nginx?.root ?? dataDir, placesRoot])
        if (root)
          for (const entry of await readdir(root)) await rm(path.join(root, entry), { recursive: true, force: true });
    },
    async stop() {
      backings.delete(backing);
      for (const store of opened.splice(0)) await store.close().catch(() => {});
      await nginx?.stop();
      await s3?.destroy();
    },
  };
  backings.add(backing);
  return backing;
}

export type { S3Store };
