import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';

/** A fresh migrated database with repository `chaos` and a principal that may write to it. */
export async function chaosDatabase(): Promise<{ db: TestDatabase & { drop(): Promise<void> }; key: string }> {
  const db = await createTestDatabase();
  await createRepository(db.pool, 'chaos');
  const { key } = await createServiceAccount(db.pool, { grants: { chaos: 'write' } });
  return { db, key };
}
