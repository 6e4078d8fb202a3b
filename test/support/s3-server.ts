/**
 * Real S3 servers for tests and benchmarks: SeaweedFS (`weed server -s3`: master, volume server,
 * filer and S3 gateway in one process) and MinIO (`minio server`), each on free loopback ports with
 * its data in a temporary directory and one bucket created. `.ci/run` builds both into
 * ${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}/bin. `stop()`/`start()` take the server away and
 * bring it back on the same ports with the same data. No vitest imports: bench/ uses it too.
 *
 * Tests share one server of each kind per run (test/support/shared-s3.ts asks the run's global setup
 * for it) and each takes a fresh bucket of its own (`openBucket`): a SeaweedFS start costs 10+ s
 * (its filer registers with the master before the first write) and a graceful stop 10+ s, a bucket
 * some milliseconds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createS3Client, s3ErrorOf, type S3Client } from '../../storage-adapter/s3/index.ts';
import { freeLoopbackPort } from '../harness/index.ts';

export type S3ServerKind = 'seaweedfs' | 'minio';

/** The SeaweedFS server's second identity: read and list only (test/support/s3-keys.ts). */
export const SEAWEEDFS_READ_KEY = {
  accessKeyId: 'arkvoryreader',
  secretAccessKey: 'arkvory-reader-secret-key',
} as const;
export const S3_SERVER_KINDS: readonly S3ServerKind[] = ['seaweedfs', 'minio'];

const TOOLS_BIN = path.join(process.env.ARKVORY_TOOLS_DIR ?? '/root/.cache/arkvory-tools', 'bin');
const BINARY: Record<S3ServerKind, string> = { seaweedfs: 'weed', minio: 'minio' };

/** Where a running server is and how to sign for it (what the global setup hands to test files). */
export interface S3ServerInfo {
  readonly kind: S3ServerKind;
  /** `http://127.0.0.1:<port>` (ARKVORY_S3_ENDPOINT). */
  readonly endpoint: string;
  readonly port: number;
  readonly region: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
}

export interface S3Server extends S3ServerInfo {
  readonly bucket: string;
  /** The gateway's storage variables for `s3://<bucket>/<prefix>`. */
  env(prefix?: string): Record<string, string>;
  /** A raw S3 client on the bucket, to look at and damage objects behind the gateway's back. */
  client(): S3Client;
  isRunning(): boolean;
  /** A dedicated server only (startS3Server); a shared one refuses. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** A dedicated server: stops it and removes its data. A shared bucket: deletes the bucket. */
  destroy(): Promise<void>;
}

export const s3ServerInfo = (s: S3Server): S3ServerInfo => ({
  kind: s.kind,
  endpoint: s.endpoint,
  port: s.port,
  region: s.region,
  accessKeyId: s.accessKeyId,
  secretAccessKey: s.secretAccessKey,
});

function binaryPath(kind: S3ServerKind): string {
  const name = BINARY[kind];
  const inTools = path.join(TOOLS_BIN, name);
  if (existsSync(inTools)) return inTools;
  for (const dir of (process.env.PATH ?? '').split(':'))
    if (dir && existsSync(path.join(dir, name))) return path.join(dir, name);
  throw new Error(
    `${name} (${kind}) is not installed in ${TOOLS_BIN} nor on PATH; run \`bash .ci/run\` once (it builds it from the Go module proxy with the pinned version), or put ${name} on PATH`,
  );
}

/** SIGTERM (SIGKILL after 10 s), or SIGKILL at once when the data is thrown away anyway. */
async function stopChild(child: ChildProcess, signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

const live = new Set<S3Server>();
/** For a caller without hooks (bench): stop every server still running. */
export async function stopAllS3Servers(): Promise<void> {
  await Promise.all([...live].map((s) => s.destroy()));
}

export interface S3ServerOptions {
  readonly bucket?: string;
  /**
   * MinIO only: serve HTTPS with this PEM chain and key (`--certs-dir` holding public.crt and
   * private.key). The caller's process must trust their CA (tls.setDefaultCACertificates), as the
   * readiness probe connects with the default CAs, as a gateway with ARKVORY_TLS_CA_FILE does.
   */
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
}

export async function startS3Server(kind: S3ServerKind, options: S3ServerOptions = {}): Promise<S3Server> {
  if (options.tls && kind !== 'minio') throw new Error(`startS3Server: TLS is set up for MinIO only, not ${kind}`);
  const binary = binaryPath(kind);
  const dir = await mkdtemp(path.join(os.tmpdir(), `arkvory-${kind}-`));
  const dataDir = path.join(dir, 'data');
  await mkdir(dataDir, { recursive: true });
  const bucket = options.bucket ?? 'arkvory-test';
  const region = 'us-east-1';
  const accessKeyId = 'arkvorytest';
  const secretAccessKey = 'arkvory-test-secret-key';
  const port = await freeLoopbackPort();
  const ports: number[] = [];
  for (let i = 0; i < 8; i++) ports.push(await freeLoopbackPort());
  let args: string[];
  let env: NodeJS.ProcessEnv = { ...process.env };
  /** Files the server makes outside `dir`, removed with it. */
  let outside: string[] = [];
  if (kind === 'seaweedfs') {
    const config = path.join(dir, 's3.json');
    await writeFile(
      config,
      JSON.stringify({
        identities: [
          {
            name: 'arkvory',
            credentials: [{ accessKey: accessKeyId, secretKey: secretAccessKey }],
            actions: ['Admin', 'Read', 'Write', 'List', 'Tagging'],
          },
          // A second key that may only read (test/support/s3-keys.ts): key rotation tests.
          {
            name: 'arkvory-reader',
            credentials: [{ accessKey: SEAWEEDFS_READ_KEY.accessKeyId, secretKey: SEAWEEDFS_READ_KEY.secretAccessKey }],
            actions: ['Read', 'List'],
          },
        ],
      }),
    );
    const [master, masterGrpc, volume, volumeGrpc, filer, filerGrpc, s3Grpc] = ports as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    args = [
      'server',
      '-ip=127.0.0.1',
      '-ip.bind=127.0.0.1',
      `-dir=${dataDir}`,
      '-filer',
      '-s3',
      `-master.port=${master}`,
      `-master.port.grpc=${masterGrpc}`,
      '-master.telemetry=false',
      '-master.volumeSizeLimitMB=256',
      `-volume.port=${volume}`,
      `-volume.port.grpc=${volumeGrpc}`,
      '-volume.max=0',
      // The default waits 10 s between the last heartbeat and the volume server's exit.
      '-volume.preStopSeconds=0',
      `-filer.port=${filer}`,
      `-filer.port.grpc=${filerGrpc}`,
      `-filer.localSocket=${dir}/filer.sock`,
      `-s3.port=${port}`,
      `-s3.port.grpc=${s3Grpc}`,
      '-s3.port.iceberg=0',
      '-s3.port.lance=0',
      `-s3.localSocket=${dir}/s3.sock`,
      `-s3.config=${config}`,
    ];
    // SeaweedFS puts a gRPC socket per part in /tmp itself (no flag moves it) and leaves it there.
    outside = (
      [
        ['master', masterGrpc],
        ['volume', volumeGrpc],
        ['filer', filerGrpc],
        ['s3', s3Grpc],
      ] as const
    ).map(([part, grpcPort]) => `/tmp/seaweedfs-${part}-grpc-${grpcPort}.sock`);
  } else {
    args = [
      'server',
      dataDir,
      '--address',
      `127.0.0.1:${port}`,
      '--console-address',
      `127.0.0.1:${ports[0]}`,
      '--quiet',
    ];
    if (options.tls) {
      const certsDir = path.join(dir, 'certs');
      await mkdir(certsDir, { recursive: true });
      await copyFile(options.tls.certFile, path.join(certsDir, 'public.crt'));
      await copyFile(options.tls.keyFile, path.join(certsDir, 'private.key'));
      args.push('--certs-dir', certsDir);
    }
    env = {
      ...env,
      MINIO_ROOT_USER: accessKeyId,
      MINIO_ROOT_PASSWORD: secretAccessKey,
      MINIO_BROWSER: 'off',
      MINIO_UPDATE: 'off',
      MINIO_CI_CD: '1',
    };
  }
  const endpoint = `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  let output = '';
  let raw: S3Client | undefined;
  const client = () =>
    (raw ??= createS3Client({
      endpoint,
      region,
      bucket,
      credentials: { accessKeyId, secretAccessKey },
      connectTimeoutMs: 2000,
      timeoutMs: 30_000,
    }));

  /** Creates the bucket, retrying while the server (SeaweedFS: its filer) is still coming up. */
  async function ensureBucket(deadline: number): Promise<void> {
    for (;;) {
      let problem: string;
      try {
        const res = await client().request({ method: 'PUT' });
        const text = await res.body.text();
        const code = s3ErrorOf(text)?.code;
        if (res.statusCode === 200 || code === 'BucketAlreadyOwnedByYou' || code === 'BucketAlreadyExists') return;
        problem = `${res.statusCode} ${code ?? text.slice(0, 200)}`;
      } catch (err) {
        problem = (err as Error).message;
      }
      if (child?.exitCode !== null || Date.now() > deadline)
        throw new Error(`${kind} did not become ready (${problem}): ${output.slice(-3000)}`);
      await sleep(200);
    }
  }

  const server: S3Server = {
    kind,
    endpoint,
    port,
    bucket,
    region,
    accessKeyId,
    secretAccessKey,
    env: (prefix = '') => ({
      ARKVORY_STORAGE_URL: `s3://${bucket}/${prefix}`,
      ARKVORY_S3_ENDPOINT: endpoint,
      ARKVORY_S3_REGION: region,
      AWS_ACCESS_KEY_ID: accessKeyId,
      AWS_SECRET_ACCESS_KEY: secretAccessKey,
    }),
    client,
    isRunning: () => child !== undefined && child.exitCode === null && child.signalCode === null,
    async stop() {
      if (child) await stopChild(child);
      child = undefined;
    },
    async start() {
      child = spawn(binary, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      const append = (d: Buffer) => {
        output = (output + d.toString()).slice(-20_000);
      };
      child.stdout!.on('data', append);
      child.stderr!.on('data', append);
      await ensureBucket(Date.now() + 90_000);
      // SeaweedFS allocates its volumes on the first write, which can take seconds on a loaded
      // machine: one write here, so tests measure the store, not the server's first allocation.
      await client().expectOk({ method: 'PUT', key: 'warm-up', body: Buffer.from('warm-up') }, 'PUT warm-up');
      await client().delete('warm-up');
    },
    async destroy() {
      // SIGKILL: the data goes with the directory, a graceful stop (10+ s for SeaweedFS) buys nothing.
      if (child) await stopChild(child, 'SIGKILL');
      child = undefined;
      await raw?.close().catch(() => {});
      raw = undefined;
      live.delete(server);
      await rm(dir, { recursive: true, force: true });
      await Promise.all(outside.map((file) => rm(file, { force: true })));
    },
  };
  live.add(server);
  try {
    await server.start();
  } catch (err) {
    await server.destroy();
    throw err;
  }
  return server;
}

/** Every key under `prefix` in the bucket (for checks), sorted. */
export async function listKeys(server: S3Server, prefix = ''): Promise<string[]> {
  const keys: string[] = [];
  for await (const entry of server.client().list(prefix)) if (entry.object) keys.push(entry.object.key);
  return keys.sort();
}

/** Deletes every object in the bucket (between tests sharing one server). */
export async function emptyBucket(server: S3Server): Promise<void> {
  for (const key of await listKeys(server)) await server.client().delete(key);
}

/** A raw client of `info`'s server on `bucket`. */
function clientOf(info: S3ServerInfo, bucket: string): S3Client {
  return createS3Client({
    endpoint: info.endpoint,
    region: info.region,
    bucket,
    credentials: { accessKeyId: info.accessKeyId, secretAccessKey: info.secretAccessKey },
    connectTimeoutMs: 2000,
    timeoutMs: 30_000,
  });
}

/**
 * A fresh bucket on a server someone else runs (the run's shared server): the same `S3Server` face
 * on `bucket`, whose `destroy()` deletes the bucket and everything in it. It cannot be stopped: a
 * test that needs the server gone uses an endpoint where nothing listens, or a link it can cut.
 */
export async function openBucket(info: S3ServerInfo, bucket: string): Promise<S3Server> {
  const raw = clientOf(info, bucket);
  const res = await raw.request({ method: 'PUT' });
  const text = await res.body.text();
  if (res.statusCode !== 200) {
    await raw.close();
    throw new Error(`${info.kind} at ${info.endpoint} refused to create bucket ${bucket}: ${res.statusCode} ${text}`);
  }
  const refuse = async () => {
    throw new Error(
      `the ${info.kind} server at ${info.endpoint} is shared by the whole run; start a dedicated one with startS3Server to stop it`,
    );
  };
  let closed = false;
  const server: S3Server = {
    ...info,
    bucket,
    env: (prefix = '') => ({
      ARKVORY_STORAGE_URL: `s3://${bucket}/${prefix}`,
      ARKVORY_S3_ENDPOINT: info.endpoint,
      ARKVORY_S3_REGION: info.region,
      AWS_ACCESS_KEY_ID: info.accessKeyId,
      AWS_SECRET_ACCESS_KEY: info.secretAccessKey,
    }),
    client: () => raw,
    isRunning: () => !closed,
    stop: refuse,
    start: refuse,
    async destroy() {
      if (closed) return;
      closed = true;
      try {
        // Open multipart uploads and objects first: MinIO deletes only an empty bucket.
        for await (const u of raw.listMultipartUploads('')) {
          const r = await raw.request({ method: 'DELETE', key: u.key, query: { uploadId: u.uploadId } });
          await r.body.dump();
        }
        await emptyBucket(server);
        const r = await raw.request({ method: 'DELETE' });
        await r.body.dump();
      } finally {
        await raw.close().catch(() => {});
      }
    },
  };
  return server;
}
