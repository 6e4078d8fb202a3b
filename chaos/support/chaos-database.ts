import { seedWriters } from '../../test/harness/index.ts';
import { createTestDatabase } from '../../test/support/database.ts';

/** A fresh migrated database with repository `chaos` and a principal that may write to it. */
export async function chaosDatabase(): Promise<{
  db: Awaited<ReturnType<typeof createTestDatabase>>;
  key: string;
}> {
  const db = await createTestDatabase();
  const [key] = await seedWriters(db.pool, 'chaos');
  return { db, key: key! };
}
