/**
 * A writer and a reader of the shared profile on one data dir, behind a proxy under test (the
 * shipped nginx and HAProxy examples), with a repository `shared`, a read key and a write key.
 */
import { expect, inject } from 'vitest';
import { sharedProfileEnv } from '../harness/index.ts';
import { bearer, createRepository, createServiceAccount } from './auth.ts';
import { request } from './content.ts';
import { createTestDatabase, type TestDatabase } from './database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from './gateway.ts';

export interface WriterAndReader {
  readonly db: TestDatabase & { drop(): Promise<void> };
  readonly writer: GatewayProcess;
  readonly reader: GatewayProcess;
  /** Reads `shared`. */
  readonly key: string;
  /** Writes `shared`. */
  readonly writeKey: string;
  /**
   * A new artifact published through the proxy at `origin` and a pre-signed link to it, made there
   * too: its content path, the link's path with its query, and the link's signature.
   */
  linkThrough(origin: string): Promise<{ content: string; link: string; signature: string }>;
  stop(): Promise<void>;
}

/** Both gateways trust 127.0.0.1 as a proxy, so the client address they charge is the one it forwards. */
export async function startWriterAndReader(): Promise<WriterAndReader> {
  const db = await createTestDatabase();
  const dataDir = await makeTempDir();
  await createRepository(db.pool, 'shared');
  const { key } = await createServiceAccount(db.pool, { scopes: ['read'], grants: { shared: 'read' } });
  const { key: writeKey } = await createServiceAccount(db.pool, {
    scopes: ['read', 'write'],
    grants: { shared: 'write' },
  });
  const env = (role: 'api' | 'reader', slot: number) => ({
    ...sharedProfileEnv({
      databaseUrl: db.url,
      redis: inject('redisUrl'),
      slots: 2,
      downloadBytesPerSecond: 512 * 1024 * 1024,
      role,
      slot,
    }),
    ARKVORY_TRUSTED_PROXIES: '127.0.0.1',
  });
  const writer = await startGateway({ env: env('api', 0), dataDir, timeoutMs: 90_000 });
  const reader = await startGateway({ env: env('reader', 1), dataDir, timeoutMs: 90_000 });
  return {
    db,
    writer,
    reader,
    key,
    writeKey,
    async linkThrough(origin) {
      const artifact = `/api/v1/repositories/shared/artifacts/logged-${Date.now()}.bin`;
      const put = await request(`${origin}${artifact}`, {
        method: 'PUT',
        headers: bearer(writeKey),
        body: Buffer.from('logged'),
      });
      expect(put.status).toBe(201);
      const made = await request(`${origin}${artifact}/presign`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from('{}'),
      });
      expect(made.status).toBe(201);
      const link = (JSON.parse(made.body.toString()) as { path: string }).path;
      const signature = new URL(link, origin).searchParams.get('X-Arkvory-Signature');
      expect(signature).toBeTruthy();
      return { content: `${artifact}/content`, link, signature: signature! };
    },
    async stop() {
      await Promise.all([writer.stop('SIGTERM'), reader.stop('SIGTERM')]);
      await db.drop();
    },
  };
}
