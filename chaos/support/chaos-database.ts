import { afterAll, beforeAll } from 'vitest';
import { seedWriters } from '../../test/harness/index.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { startToxiproxy, type ToxiproxyServer } from './toxiproxy.ts';

/** A fresh migrated database with repository `chaos` and a principal that may write to it. */
export async function chaosDatabase(): Promise<{
  db: Awaited<ReturnType<typeof createTestDatabase>>;
  key: string;
}> {
  const db = await createTestDatabase();
  const [key] = await seedWriters(db.pool, 'chaos');
  return { db, key: key! };
}

export interface ChaosBase {
  readonly toxiproxy: ToxiproxyServer;
  readonly db: TestDatabase & { drop(): Promise<void> };
  /** A key with write on repository `chaos`. */
  readonly key: string;
}

/**
 * A file's toxiproxy server and `chaosDatabase()`, set before its first test. Registered before the
 * file's own hooks, they are torn down after the file's teardown (vitest runs afterAll hooks in
 * reverse), so the gateways are stopped before their links and database go.
 */
export function useToxiproxyAndDatabase(): ChaosBase {
  const base: { -readonly [K in keyof ChaosBase]?: ChaosBase[K] } = {};
  beforeAll(async () => {
    base.toxiproxy = await startToxiproxy();
    Object.assign(base, await chaosDatabase());
  });
  afterAll(async () => {
    await base.toxiproxy?.stop();
    await base.db?.drop();
  });
  return base as ChaosBase;
}
