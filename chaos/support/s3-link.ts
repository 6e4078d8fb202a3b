/**
 * A describe block's S3 server of `kind` (the run's shared one, on a fresh bucket) reached through a
 * toxiproxy link, with a database holding repository `chaos` and a key that may write to it.
 */
import { afterAll, beforeAll } from 'vitest';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { type TestDatabase, useTestDatabase } from '../../test/support/database.ts';
import type { S3Server, S3ServerKind } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { type ProxiedUpstream, startToxiproxy, type ToxiproxyServer } from './toxiproxy.ts';

export interface S3Link {
  readonly db: TestDatabase;
  readonly toxiproxy: ToxiproxyServer;
  readonly server: S3Server;
  readonly link: ProxiedUpstream;
  readonly key: string;
  /** The gateway's database and S3 variables, the endpoint through the link, with short store timeouts. */
  env(): Record<string, string>;
}

export function useS3Link(kind: S3ServerKind): S3Link {
  const db = useTestDatabase();
  const s3 = { db } as { -readonly [K in keyof S3Link]: S3Link[K] };
  s3.env = () => ({
    ARKVORY_DATABASE_URL: db.url,
    ...s3.server.env(),
    ARKVORY_S3_ENDPOINT: `http://${s3.link.host}:${s3.link.port}`,
    ARKVORY_STORAGE_TIMEOUT_SECONDS: '5',
    ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '1000',
  });
  beforeAll(async () => {
    s3.toxiproxy = await startToxiproxy();
    s3.server = await sharedS3Bucket(kind);
    s3.link = await s3.toxiproxy.proxyTo(`127.0.0.1:${s3.server.port}`);
    await createRepository(db.pool, 'chaos');
    ({ key: s3.key } = await createServiceAccount(db.pool, { grants: { chaos: 'write' } }));
  });
  afterAll(async () => {
    await s3.toxiproxy?.stop();
    await s3.server?.destroy();
  });
  return s3;
}
