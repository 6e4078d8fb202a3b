/**
 * Expected failures of real CLI processes are the one line `arkvory: <code>: <message>` on stderr,
 * never a stack: a key file that cannot be read, a database login without the privilege (exit 1), a
 * change whose audit entry cannot be recorded (its result is printed all the same; exit 3); a --cursor
 * that is not a listing's own (exit 2, before connecting).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { installRoleLogins } from '../../test/support/database-roles.ts';
import { makeTempDir, runCli } from '../../test/support/gateway.ts';
import { CURSORS, encodeCursor } from '../../policy/auth/page.ts';
import type { DatabaseRole } from '../../migrations/grants.ts';

let db: TestDatabase & { drop(): Promise<void> };
let urls: Record<DatabaseRole, string>;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  urls = await installRoleLogins(db.url);
}, 90_000);

afterAll(async () => {
  await db?.drop();
});

/** stderr is exactly one line of the documented form, with this code. */
function expectOneLine(stderr: string, code: string): void {
  expect(stderr).toMatch(new RegExp(`^arkvory: ${code}: [^\\n]+\\n$`));
  expect(stderr).not.toContain('    at ');
}

describe('CLI failures as one line', () => {
  it('a --key-file that does not exist is `io`, exit 1', async () => {
    const dir = await makeTempDir();
    const r = await runCli(['get', 'libs/x', '--key-file', '/nonexistent/key', '-o', `${dir}/x`], {
      ARKVORY_URL: 'http://127.0.0.1:1',
      ARKVORY_DATA_DIR: dir,
    });
    expect(r.code, r.stderr).toBe(1);
    expectOneLine(r.stderr, 'io');
    expect(r.stderr).toContain("ENOENT: no such file or directory, open '/nonexistent/key'");
  });

  it("an admin command with the reader's login is `database_permission`, exit 1", async () => {
    const r = await runCli(['principals', 'create', 'bob'], {
      ARKVORY_DATABASE_URL: urls.reader,
      ARKVORY_DATA_DIR: await makeTempDir(),
    });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toBe('');
    expectOneLine(r.stderr, 'database_permission');
    expect(r.stderr).toContain('permission denied for table arkvory_principals');
  });

  it('a change whose audit entry fails is printed, then `audit_not_recorded`, exit 3 (done: not to be made again)', async () => {
    const env = { ARKVORY_DATABASE_URL: urls.writer, ARKVORY_DATA_DIR: await makeTempDir() };
    expect((await runCli(['repos', 'create', 'r1'], env)).code).toBe(0);
    // Local to this database (a revoked grant would be the cluster-wide group role's).
    await db.pool.query(`CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$`);
    await db.pool.query(`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON arkvory_audit_events
      FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()`);

    const quota = await runCli(['quota', 'set', '--repository', 'r1', '--bytes', '1M'], env);
    expect(quota.code, quota.stderr).toBe(3);
    expect(JSON.parse(quota.stdout)).toMatchObject({ scope: 'repository', subject: 'r1', limitBytes: 1024 ** 2 });
    expectOneLine(quota.stderr, 'audit_not_recorded');
    expect(quota.stderr).toContain(
      'quota.set was done, but its audit entry was not recorded: audit refused by the test',
    );

    const purge = await runCli(['cache', 'purge', '--sha256', 'a'.repeat(64)], env);
    expect(purge.code, purge.stderr).toBe(3);
    expect(JSON.parse(purge.stdout)).toEqual({ purged: ['a'.repeat(64)] });
    expectOneLine(purge.stderr, 'audit_not_recorded');

    const principal = await runCli(['principals', 'create', 'carol'], env);
    expect(principal.code, principal.stderr).toBe(3);
    expect(JSON.parse(principal.stdout)).toMatchObject({ name: 'carol' });
    expectOneLine(principal.stderr, 'audit_not_recorded');
  });

  it('a --cursor that is not valid, or was made for another listing, is a usage error before connecting: exit 2', async () => {
    // Nothing listens there: a command that connected would fail with exit 1.
    const env = { ARKVORY_DATABASE_URL: 'postgres://nobody:x@127.0.0.1:1/none', ARKVORY_DATA_DIR: await makeTempDir() };
    const forged = await runCli(['principals', 'list', '--cursor', 'bm90IGEgY3Vyc29y'], env);
    expect([forged.code, forged.stdout]).toEqual([2, '']);
    expect(forged.stderr).toContain(
      'arkvory principals list: --cursor is not valid: no listing gave it; start without it',
    );
    // The admin API answers both 400 invalid_request with the same words (admin-input.int.test.ts).
    const foreign = await runCli(['repos', 'list', '--cursor', encodeCursor(CURSORS.principals, ['alice'])], env);
    expect([foreign.code, foreign.stdout]).toEqual([2, '']);
    expect(foreign.stderr).toContain(
      'arkvory repos list: --cursor was made for the principals listing, not this one (repositories); start without it',
    );
    const overrides = await runCli(
      ['rules-service', 'list', '--cursor', encodeCursor(CURSORS.grants, ['a', 'b'])],
      env,
    );
    expect([overrides.code, overrides.stdout]).toEqual([2, '']);
    expect(overrides.stderr).toContain('--cursor was made for the grants listing, not this one (rule overrides)');
  });
});
