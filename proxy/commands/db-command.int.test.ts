import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { runCli } from '../../test/support/gateway.ts';

describe('arkvory db roles', () => {
  const db = useTestDatabase({ migrated: false });

  it('run several times at once on a new database, every run succeeds (they wait for each other)', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    // Twice: the first round also migrates and creates roles, the second finds them and only re-grants.
    for (let round = 0; round < 2; round++) {
      const runs = await Promise.all(Array.from({ length: 4 }, () => runCli(['db', 'roles'], env)));
      expect(
        runs.map((r) => r.code),
        runs.map((r) => r.stderr).join('\n'),
      ).toEqual([0, 0, 0, 0]);
    }
  });
});
