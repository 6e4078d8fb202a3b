/**
 * Provides a real PostgreSQL and a real Redis to the whole run:
 * - ARKVORY_TEST_DATABASE_URL (a server where we may CREATE/DROP DATABASE), else an embedded
 *   PostgreSQL started here in a temporary directory;
 * - ARKVORY_TEST_REDIS_URL, else a `redis-server` from PATH on a free loopback port. With neither,
 *   the run fails and says how to install it.
 * Test files then make their own database and key prefix (test/support/database.ts, redis.ts).
 * - the S3 servers (SeaweedFS, MinIO), each started once per run on the first request to a small
 *   loopback hub (`s3HubUrl`, GET /s3/<kind>); test files take a fresh bucket on them
 *   (test/support/shared-s3.ts). A run that asks for none starts none.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import http from '../../lib/node-http.ts';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedDatabase, type EmbeddedDatabase } from '../../proxy/server/embedded-database.ts';
import { createLogger } from '../../proxy/server/logger.ts';
import { describeToxiproxyServer } from '../../chaos/support/toxiproxy.ts';
import { S3_SERVER_KINDS, s3ServerInfo, startS3Server, type S3Server, type S3ServerKind } from './s3-server.ts';
import {
  createMigratedTemplate,
  PORT_CLAIMS_VARIABLE,
  REDIS_INSTALL_HINT,
  startRedisServer,
  type RedisServer,
} from '../harness/index.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    /** A migrated database on it that createTestDatabase copies instead of migrating each one. */
    migratedTemplate: string;
    redisUrl: string;
    /** The S3 server hub (test/support/shared-s3.ts): GET /s3/<kind> → S3ServerInfo. */
    s3HubUrl: string;
  }
}

async function checkPostgres(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (err) {
    throw new Error(
      `ARKVORY_TEST_DATABASE_URL=${url.replace(/:[^:@/]*@/, ':***@')} is not reachable (${(err as Error).message}); start PostgreSQL or unset the variable to use an embedded one`,
    );
  } finally {
    await client.end().catch(() => {});
  }
}

/** A real redis-server from PATH on a free loopback port, without persistence (also used by chaos scenarios that need one of their own). */
export async function startRedis(): Promise<RedisServer> {
  try {
    return await startRedisServer({ args: ['--protected-mode', 'yes'] });
  } catch (err) {
    if (!(err instanceof Error) || err.message !== REDIS_INSTALL_HINT) throw err;
    throw new Error(
      'redis-server is not on PATH and ARKVORY_TEST_REDIS_URL is not set; install it with `apt-get install redis-server` (Debian) or point ARKVORY_TEST_REDIS_URL at a Redis',
    );
  }
}

async function checkRedis(url: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.ping();
  } catch (err) {
    throw new Error(
      `ARKVORY_TEST_REDIS_URL=${url} is not reachable (${(err as Error).message}); start Redis or unset the variable to launch redis-server from PATH`,
    );
  } finally {
    client.disconnect();
  }
}

interface Services {
  databaseUrl: string;
  migratedTemplate: string;
  redisUrl: string;
  s3HubUrl: string;
  cleanups: Array<() => Promise<void>>;
}

// Vitest loads the root global setup once per project, each a separate module instance in the same
// process; the services are started once and shared through globalThis.
const shared = globalThis as typeof globalThis & {
  __arkvoryTestServices?: { started: Promise<Services>; users: number };
};

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  shared.__arkvoryTestServices ??= { started: startServices(), users: 0 };
  const state = shared.__arkvoryTestServices;
  state.users++;
  const services = await state.started;
  project.provide('adminDatabaseUrl', services.databaseUrl);
  project.provide('migratedTemplate', services.migratedTemplate);
  project.provide('redisUrl', services.redisUrl);
  project.provide('s3HubUrl', services.s3HubUrl);
  // The chaos project names, once per run, the toxiproxy server it runs against.
  if (project.name === 'chaos')
    process.stderr.write(
      `[chaos] ${await describeToxiproxyServer().catch((err: Error) => `no toxiproxy server: ${err.message}`)}\n`,
    );
  return async () => {
    if (--state.users > 0) return;
    shared.__arkvoryTestServices = undefined;
    for (const cleanup of services.cleanups.reverse()) await cleanup();
  };
}

async function startServices(): Promise<Services> {
  const cleanups: Array<() => Promise<void>> = [];
  // Every temporary directory of the run goes under one root, removed last: vitest stops running a
  // file's afterAll hooks at the first that throws, so a file whose own end-of-file check fails
  // skips the harness's clean-up (test/support/gateway.ts). os.tmpdir() reads TMPDIR, and every
  // worker and process of the run inherits it. Readable by all, as the directories made in it.
  const root = await mkdtemp(path.join(os.tmpdir(), 'arkvory-test-run-'));
  await chmod(root, 0o755);
  process.env.TMPDIR = root;
  cleanups.push(() => rm(root, { recursive: true, force: true }));
  // Set before any service or worker starts: every process of the run claims its ports there.
  const claims = await mkdtemp(path.join(os.tmpdir(), 'arkvory-test-ports-'));
  process.env[PORT_CLAIMS_VARIABLE] = claims;
  cleanups.push(() => rm(claims, { recursive: true, force: true }));
  let databaseUrl = process.env.ARKVORY_TEST_DATABASE_URL;
  if (databaseUrl) {
    await checkPostgres(databaseUrl);
  } else {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-test-pg-'));
    await chmod(dir, 0o755);
    // A throwaway cluster, deleted after the run and never crashed by a test (the tests that stop a
    // PostgreSQL start their own): no fsync, no full-page images, commits not waiting for their WAL
    // flush. Commits and DROP DATABASE then stop waiting on this machine's disk.
    const embedded: EmbeddedDatabase = await startEmbeddedDatabase(dir, createLogger('warn'), {
      postgresFlags: ['-c', 'fsync=off', '-c', 'full_page_writes=off', '-c', 'synchronous_commit=off'],
    });
    databaseUrl = embedded.url;
    cleanups.push(async () => {
      await embedded.stop();
      await rm(dir, { recursive: true, force: true });
    });
  }
  const template = await createMigratedTemplate(databaseUrl);
  cleanups.push(template.drop);
  let redisUrl = process.env.ARKVORY_TEST_REDIS_URL;
  if (redisUrl) {
    await checkRedis(redisUrl);
  } else {
    const redis = await startRedis();
    redisUrl = redis.url;
    cleanups.push(async () => {
      redis.signal('SIGTERM');
    });
  }
  const hub = await startS3Hub();
  cleanups.push(hub.stop);
  process.stderr.write(
    `[test services] PostgreSQL: ${process.env.ARKVORY_TEST_DATABASE_URL ? 'ARKVORY_TEST_DATABASE_URL' : 'embedded'}; Redis: ${process.env.ARKVORY_TEST_REDIS_URL ? 'ARKVORY_TEST_REDIS_URL' : `redis-server on ${redisUrl}`}\n`,
  );
  return { databaseUrl, migratedTemplate: template.name, redisUrl, s3HubUrl: hub.url, cleanups };
}

/** GET /s3/<kind> starts that S3 server once (later requests wait for the same start) and answers its S3ServerInfo. */
async function startS3Hub(): Promise<{ url: string; stop: () => Promise<void> }> {
  const servers = new Map<S3ServerKind, Promise<S3Server>>();
  const hub = http.createServer((req, res) => {
    const kind = /^\/s3\/([a-z0-9]+)$/.exec(req.url ?? '')?.[1] as S3ServerKind | undefined;
    if (req.method !== 'GET' || !kind || !S3_SERVER_KINDS.includes(kind)) {
      res.writeHead(404).end(`GET /s3/{${S3_SERVER_KINDS.join('|')}}`);
      return;
    }
    let started = servers.get(kind);
    if (!started) {
      started = startS3Server(kind);
      servers.set(kind, started);
      // A failed start (binary missing, port taken) is tried again by the next request.
      started.catch(() => servers.delete(kind));
      void started.then((s) => process.stderr.write(`[test services] ${kind} on ${s.endpoint}\n`)).catch(() => {});
    }
    started.then(
      (s) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(s3ServerInfo(s))),
      (err: Error) => res.writeHead(503, { 'content-type': 'text/plain' }).end(err.message),
    );
  });
  hub.headersTimeout = 0;
  hub.requestTimeout = 0;
  await new Promise<void>((resolve) => hub.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(hub.address() as AddressInfo).port}`,
    async stop() {
      hub.closeAllConnections();
      await new Promise((resolve) => hub.close(resolve));
      for (const started of servers.values()) await (await started.catch(() => undefined))?.destroy();
    },
  };
}
