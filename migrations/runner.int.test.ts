import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../test/support/database.ts';
import { runCli } from '../test/support/gateway.ts';
import { listMigrations, pendingMigrations } from './runner.ts';

describe('migrations', () => {
  it('two migrate commands started at once both exit 0 and apply each migration once', async () => {
    const db = await createTestDatabase({ migrated: false });
    try {
      const [a, b] = await Promise.all([
        runCli(['migrate'], { ARKVORY_DATABASE_URL: db.url }),
        runCli(['migrate'], { ARKVORY_DATABASE_URL: db.url }),
      ]);
      expect(a.code, a.stderr).toBe(0);
      expect(b.code, b.stderr).toBe(0);
      const all = await listMigrations();
      const rows = await db.pool.query<{ version: number }>(
        'SELECT version FROM arkvory_schema_migrations ORDER BY version',
      );
      expect(rows.rows.map((r) => r.version)).toEqual(all.map((m) => m.version));
      // Exactly one of the two runs applied them.
      expect([a.stdout, b.stdout].filter((s) => s.startsWith('applied')).length).toBe(1);
      const again = await runCli(['migrate'], { ARKVORY_DATABASE_URL: db.url });
      expect(again.stdout).toBe('schema is up to date\n');
      expect(await pendingMigrations(db.pool)).toEqual([]);
    } finally {
      await db.drop();
    }
  });

  it('numbers migrations uniquely and in order', async () => {
    const all = await listMigrations();
    expect(all.length).toBeGreaterThan(0);
    expect(all.map((m) => m.version)).toEqual([...all.map((m) => m.version)].sort((x, y) => x - y));
  });

  it('migrate without a database URL exits 2 with a clear message', async () => {
    const r = await runCli(['migrate'], {});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('ARKVORY_DATABASE_URL is not set');
  });
});
