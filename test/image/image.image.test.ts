/**
 * The container image of deploy/container/build.sh, built (or reused from the build cache) and run
 * as a runtime would run it (test/image/container.ts): against the harness's PostgreSQL and Redis,
 * an upload and a ranged download byte-exact, as the image's non-root user on a read-only root
 * with writable mounts only where docs/deploy.md says; SIGTERM drains and exits 0; every role from
 * the one image in a shared-profile topology; the embedded default on a data volume.
 */
import http from 'node:http';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freeLoopbackPort } from '../harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../support/auth.ts';
import { randomContent, request, sha256 } from '../support/content.ts';
import { createTestDatabase } from '../support/database.ts';
import { deleteKeysWithPrefix } from '../support/redis.ts';
import {
  buildImage,
  isRuntimeMount,
  mountsOf,
  prepareRuntime,
  runContainer,
  unpackImage,
  volumeDir,
  waitReady,
  type Container,
  type ContainerOptions,
  type ImageBuild,
  type UnpackedImage,
} from './container.ts';

const MiB = 1024 * 1024;
/** What docs/deploy.md lists as the container's writable places. */
const WRITABLE = ['/tmp', '/var/lib/arkvory'];
const DATA = '/var/lib/arkvory';

let work: string;
let build: ImageBuild;
let image: UnpackedImage;
const containers: Container[] = [];
let volumes = 0;
/** Every Redis key the containers write starts with this; removed when the file ends. */
const REDIS_PREFIX = `arkvory:t:image:${process.pid}:`;

function start(options: ContainerOptions): Container {
  const container = runContainer(image, options);
  containers.push(container);
  return container;
}

/** A fresh host directory owned by the image's user, mounted at the data dir. */
async function dataVolume(): Promise<string> {
  return volumeDir(path.join(work, `volume-${++volumes}`), image.process.user.uid, image.process.user.gid);
}

/** Loopback on the host network (`podman run --network host -e ARKVORY_HOST=127.0.0.1`), a free port. */
async function gatewayEnv(
  extra: Record<string, string>,
): Promise<{ env: Record<string, string>; url: string; port: number }> {
  const port = await freeLoopbackPort();
  const url = `http://127.0.0.1:${port}`;
  return { env: { ARKVORY_HOST: '127.0.0.1', ARKVORY_PORT: String(port), ...extra }, url, port };
}

async function stopAndWait(container: Container): Promise<{ code: number | string; ms: number }> {
  const at = performance.now();
  await container.signal('SIGTERM');
  const code = await container.exited;
  return { code, ms: performance.now() - at };
}

beforeAll(async () => {
  if (process.getuid?.() !== 0)
    throw new Error(
      'the image tests unpack the image with its owners and run it in mount and PID namespaces, which needs root; run them as root (CI runs as root), e.g. `sudo npx vitest run --project image`',
    );
  work = await mkdtemp(path.join(os.tmpdir(), 'arkvory-image-'));
  build = await buildImage(path.join(work, 'out'));
  image = await unpackImage(build.archive, path.join(work, 'unpacked'));
  await prepareRuntime(build.archive, image);
}, 1_800_000);

afterAll(async () => {
  await Promise.all(containers.map((c) => c.kill()));
  const redis = new Redis(inject('redisUrl'), { lazyConnect: true, maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  await redis
    .connect()
    .then(() => deleteKeysWithPrefix(redis, REDIS_PREFIX))
    .catch(() => {});
  redis.disconnect();
  await Promise.all(containers.map((c) => c.exited));
  if (work) await rm(work, { recursive: true, force: true });
});

describe('the image', () => {
  it('is labelled, runs tini as PID 1 and the gateway as a fixed non-root user, declares its volumes, fits 200 MB, and has an SBOM', async () => {
    const { config } = image.image;
    const version = JSON.parse(await readFile(path.resolve(import.meta.dirname, '../../package.json'), 'utf8')).version;
    expect(build.info.image).toBe(`localhost/arkvory:${version}`);
    expect(config.Labels['org.opencontainers.image.version']).toBe(version);
    expect(config.Labels['org.opencontainers.image.revision']).toMatch(/^[0-9a-f]{40}(-dirty)?$/);
    expect(config.Labels['org.opencontainers.image.source']).toMatch(/^https:\/\//);
    expect(config.Entrypoint).toEqual(['/usr/bin/tini', '--', '/usr/local/bin/node', '/app/bin/arkvory.js']);
    expect(config.Cmd).toEqual(['serve']);
    expect(config.User).toBe('10001:10001');
    expect(image.process.user).toEqual({ uid: 10001, gid: 10001 });
    expect(Object.keys(config.Volumes).sort()).toEqual(WRITABLE);
    expect(config.Env).toContain(`ARKVORY_DATA_DIR=${DATA}`);
    expect(build.info.uncompressedBytes).toBeLessThanOrEqual(200e6);
    const sbom = JSON.parse(await readFile(build.sbom, 'utf8')) as {
      spdxVersion: string;
      packages: Array<{ name: string; versionInfo?: string }>;
    };
    expect(sbom.spdxVersion).toMatch(/^SPDX-2\./);
    expect(sbom.packages.length).toBe(build.info.sbomPackages);
    const names = new Set(sbom.packages.map((p) => p.name));
    // Debian's packages, the production npm dependencies, and no development one.
    for (const name of ['libc6', 'libstdc++6', 'tzdata', 'ca-certificates', 'tini', 'pg', 'ioredis', 'pino', 'undici'])
      expect(names, name).toContain(name);
    for (const name of ['vitest', 'typescript', '@biomejs/biome']) expect(names, name).not.toContain(name);
    process.stderr.write(`[image] ${build.output}`);
  });

  it('against PostgreSQL and Redis: /health/ready answers, an upload and a ranged download are byte-exact, as uid 10001 on a read-only root, writable only at /tmp and the data volume', async () => {
    const db = await createTestDatabase();
    try {
      await createRepository(db.pool, 'img');
      const { key } = await createServiceAccount(db.pool, { grants: { img: 'write' } });
      const { env, url } = await gatewayEnv({
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: inject('redisUrl'),
        ARKVORY_REDIS_KEY_PREFIX: `${REDIS_PREFIX}standalone:`,
      });
      const gw = start({ env, volumes: { [await dataVolume()]: DATA } });
      await waitReady(gw, `${url}/health/status`);
      const ready = await request(`${url}/health/ready`, { headers: bearer(key) });
      expect(ready.status).toBe(200);
      expect(JSON.parse(ready.body.toString())).toMatchObject({ role: 'api', writable: true });

      const file = randomContent(5 * MiB + 123);
      const put = await request(`${url}/api/v1/repositories/img/artifacts/a.bin`, {
        method: 'PUT',
        headers: bearer(key),
        body: file,
      });
      expect(put.status).toBe(201);
      const ranged = await request(`${url}/api/v1/repositories/img/artifacts/a.bin/content`, {
        headers: { ...bearer(key), range: 'bytes=1000-3000999' },
      });
      expect(ranged.status).toBe(206);
      expect(ranged.headers['content-range']).toBe(`bytes 1000-3000999/${file.length}`);
      expect(sha256(ranged.body)).toBe(sha256(file.subarray(1000, 3001000)));

      // PID 1 is tini; its one child is the gateway, as the image's user with no other group.
      const pid1 = await gw.pid1();
      expect((await readFile(`/proc/${pid1}/comm`, 'utf8')).trim()).toBe('tini');
      const [gateway] = await gw.children(pid1);
      const status = await readFile(`/proc/${gateway}/status`, 'utf8');
      expect(status).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
      expect(status).toMatch(/^Gid:\s+10001\s+10001\s+10001\s+10001$/m);
      expect(status).toMatch(/^Groups:\s*$/m);
      expect(status).toMatch(new RegExp(`^PPid:\\s+${pid1}$`, 'm'));
      expect(await readFile(`/proc/${pid1}/status`, 'utf8')).toMatch(/^NSpid:\s+\d+\s+1$/m);
      // The root is read-only; writable file systems only where documented (plus the runtime's /dev, /proc).
      const mounts = await mountsOf(gateway!);
      expect(mounts.find((m) => m.mountPoint === '/')?.readOnly).toBe(true);
      const writable = mounts
        .filter((m) => !m.readOnly && !isRuntimeMount(m.mountPoint))
        .map((m) => m.mountPoint)
        .sort();
      expect(writable).toEqual(WRITABLE);
      expect(mounts.find((m) => m.mountPoint === '/tmp')?.type).toBe('tmpfs');
      // What the gateway wrote went to the volume.
      expect(gw.logLines().some((l) => l.level === 'error' || l.level === 'fatal')).toBe(false);
      expect((await stopAndWait(gw)).code).toBe(0);
    } finally {
      await db.drop();
    }
  });

  it('SIGTERM to PID 1 during an unthrottled download: the download completes byte-exact, the container exits 0 within the drain bound', async () => {
    const db = await createTestDatabase();
    try {
      await createRepository(db.pool, 'drain');
      const { key } = await createServiceAccount(db.pool, { grants: { drain: 'write' } });
      const drainSeconds = 10;
      const volume = await dataVolume();
      const { env, url } = await gatewayEnv({
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_SHUTDOWN_TIMEOUT_SECONDS: String(drainSeconds),
      });
      const gw = start({ env, volumes: { [volume]: DATA } });
      await waitReady(gw, `${url}/health/status`);
      const file = randomContent(50 * MiB);
      const content = `${url}/api/v1/repositories/drain/artifacts/f.bin`;
      expect((await request(content, { method: 'PUT', headers: bearer(key), body: file })).status).toBe(201);

      // The client reads the first bytes, then pauses while the container is told to stop.
      const chunks: Buffer[] = [];
      let response!: http.IncomingMessage;
      await new Promise<void>((firstBytes, failed) => {
        http
          .get(`${content}/content`, { headers: bearer(key), agent: false }, (res) => {
            response = res;
            res.once('data', () => {
              res.pause();
              firstBytes();
            });
            res.on('data', (c: Buffer) => chunks.push(c));
          })
          .on('error', failed);
      });
      const ended = new Promise<void>((resolve) => response.once('close', resolve));
      const signalledAt = performance.now();
      await gw.signal('SIGTERM');
      // Draining: readiness is 503 while the download is still open.
      let probe = 0;
      for (let i = 0; i < 100 && probe !== 503; i++)
        probe = (await request(`${url}/health/status`).catch(() => ({ status: 0 }))).status;
      expect(probe).toBe(503);
      response.resume();
      await ended;
      expect(response.complete).toBe(true);
      const body = Buffer.concat(chunks);
      expect(body.length).toBe(file.length);
      expect(sha256(body)).toBe(sha256(file));
      expect(await gw.exited).toBe(0);
      // Within the drain bound (ARKVORY_SHUTDOWN_TIMEOUT_SECONDS) plus the close steps.
      expect(performance.now() - signalledAt).toBeLessThan((drainSeconds + 5) * 1000);
      expect(gw.logLines().some((l) => l.msg === 'shutting down' && l.signal === 'SIGTERM')).toBe(true);
      expect(gw.logLines().filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
    } finally {
      await db.drop();
    }
  });

  it('every role from the same image: writer, reader, worker and router in the shared profile on the host network, writer, reader and router on two worker processes each', async () => {
    const db = await createTestDatabase();
    try {
      await createRepository(db.pool, 'shared');
      const { key } = await createServiceAccount(db.pool, { grants: { shared: 'write' } });
      const volume = await dataVolume();
      const shared = {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: inject('redisUrl'),
        ARKVORY_REDIS_KEY_PREFIX: `${REDIS_PREFIX}shared:`,
        ARKVORY_GATEWAY_SLOTS: '2',
        ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(64 * MiB),
        // tini hands the container's stop to the coordinating process, which drains its workers.
        ARKVORY_WORKERS: '2',
      };
      const gateway = async (role: string, slot: number) => {
        const { env, url } = await gatewayEnv({ ...shared, ARKVORY_ROLE: role, ARKVORY_GATEWAY_SLOT: String(slot) });
        const container = start({ env: { ...env, ARKVORY_ADVERTISE_URL: url }, volumes: { [volume]: DATA } });
        await waitReady(container, `${url}/health/status`, 90_000);
        return { container, url };
      };
      const writer = await gateway('api', 0);
      const reader = await gateway('reader', 1);
      const worker = await (async () => {
        // The completion worker holds no download slot: the database (and the shared data volume) only.
        const { env, url } = await gatewayEnv({ ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker' });
        const container = start({ env, volumes: { [volume]: DATA } });
        await waitReady(container, `${url}/health/status`, 90_000);
        return { container, url };
      })();
      const router = await (async () => {
        const { env, url } = await gatewayEnv({
          ARKVORY_ROLE: 'router',
          ARKVORY_DATABASE_URL: db.url,
          ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '200',
          ARKVORY_WORKERS: '2',
        });
        // The router writes nothing: no volume.
        const container = start({ env });
        await waitReady(container, `${url}/health/status`);
        return { container, url };
      })();
      let backends = { total: 0, healthy: 0 };
      for (let i = 0; i < 200 && backends.healthy < 2; i++) {
        backends = JSON.parse((await request(`${router.url}/health/status`)).body.toString()).backends ?? backends;
        if (backends.healthy < 2) await new Promise((r) => setTimeout(r, 50));
      }
      expect(backends).toMatchObject({ total: 2, healthy: 2 });

      const file = randomContent(3 * MiB + 7);
      const put = await request(`${router.url}/api/v1/repositories/shared/artifacts/s.bin`, {
        method: 'PUT',
        headers: bearer(key),
        body: file,
      });
      expect(put.status).toBe(201);
      for (const { url } of [router, writer, reader]) {
        const got = await request(`${url}/api/v1/repositories/shared/artifacts/s.bin/content`, {
          headers: { ...bearer(key), range: 'bytes=5-' },
        });
        expect(got.status, url).toBe(206);
        expect(sha256(got.body)).toBe(sha256(file.subarray(5)));
      }
      const roles = await Promise.all(
        [writer, reader].map(async ({ url }) =>
          JSON.parse((await request(`${url}/health/ready`, { headers: bearer(key) })).body.toString()),
        ),
      );
      expect(roles.map((r) => [r.role, r.sharedDownloads?.slot, r.workers?.length])).toEqual([
        ['api', 0, 2],
        ['reader', 1, 2],
      ]);
      expect(JSON.parse((await request(`${router.url}/health/status`)).body.toString()).workers).toHaveLength(2);
      // Each runs under its own tini (PID 1 of its namespace), from the one unpacked root.
      for (const { container } of [writer, reader, worker, router]) {
        const pid1 = await container.pid1();
        expect((await readFile(`/proc/${pid1}/comm`, 'utf8')).trim()).toBe('tini');
        expect(await readFile(`/proc/${pid1}/status`, 'utf8')).toMatch(/^NSpid:\s+\d+\s+1$/m);
        expect(await readFile(`/proc/${pid1}/root/app/package.json`, 'utf8')).toBe(
          await readFile(path.join(image.rootfs, 'app/package.json'), 'utf8'),
        );
      }
      const codes = await Promise.all([router, worker, reader, writer].map(({ container }) => stopAndWait(container)));
      expect(codes.map((c) => c.code)).toEqual([0, 0, 0, 0]);
    } finally {
      await db.drop();
    }
  }, 240_000);

  it('the embedded default (no database URL): PostgreSQL starts on the data volume as the image user, survives a restart, and stops with the container', async () => {
    const volume = await dataVolume();
    for (const round of [1, 2]) {
      const { env, url } = await gatewayEnv({});
      const gw = start({ env, volumes: { [volume]: DATA } });
      await waitReady(gw, `${url}/health/status`, 120_000);
      const adminKey = (await readFile(path.join(volume, 'admin.key'), 'utf8')).trim();
      const ready = await request(`${url}/health/ready`, { headers: bearer(adminKey) });
      expect(ready.status, `round ${round}`).toBe(200);
      expect(JSON.parse(ready.body.toString())).toMatchObject({ role: 'api', sharedDownloads: null });
      // The cluster lives on the volume, owned by the image's user.
      const pgVersion = await readFile(path.join(volume, '.pg/PG_VERSION'), 'utf8');
      expect(pgVersion.trim()).toMatch(/^\d+$/);
      const { code } = await stopAndWait(gw);
      expect(code, gw.logs()).toBe(0);
      // The embedded PostgreSQL stopped with it: no postmaster.pid left.
      await expect(readFile(path.join(volume, '.pg/postmaster.pid'))).rejects.toThrow(/ENOENT/);
      expect(gw.logLines().filter((l) => l.level === 'error' || l.level === 'fatal')).toEqual([]);
    }
  }, 240_000);
});
