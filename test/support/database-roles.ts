/**
 * Least-privilege test databases: `arkvory db roles` (the project's own command) run on a test
 * database, then one login per group role, each with its own password. Logins are cluster-wide:
 * their names are random and they are dropped when the file ends.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { expect, inject } from 'vitest';
import { onFileEnd } from './file-end.ts';
import { DATABASE_ROLES, groupRoleName, type DatabaseRole } from '../../migrations/grants.ts';
import { runCli } from './gateway.ts';
import { openPool } from '../harness/index.ts';

const logins: string[] = [];

onFileEnd(async () => {
  if (logins.length === 0) return;
  const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  try {
    for (const login of logins) await admin.query(`DROP ROLE IF EXISTS ${login}`).catch(() => {});
  } finally {
    await admin.end();
  }
});

/** `url` with another user and password. */
export function urlAs(url: string, user: string, password: string): string {
  const u = new URL(url);
  u.username = user;
  u.password = password;
  return u.toString();
}

/** Runs `arkvory db roles` on the database at `url` (an admin's) and makes one login per role. */
export async function installRoleLogins(url: string): Promise<Record<DatabaseRole, string>> {
  const result = await runCli(['db', 'roles'], { ARKVORY_DATABASE_URL: url });
  expect(result.code, result.stderr).toBe(0);
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const urls = {} as Record<DatabaseRole, string>;
  try {
    for (const role of DATABASE_ROLES) {
      const login = `arkvory_t_${role}_${randomBytes(4).toString('hex')}`;
      const password = randomBytes(12).toString('hex');
      await admin.query(`CREATE ROLE ${login} LOGIN PASSWORD '${password}' IN ROLE ${groupRoleName(role)}`);
      logins.push(login);
      urls[role] = urlAs(url, login, password);
    }
  } finally {
    await admin.end();
  }
  return urls;
}

/** A small pool for a role's login. */
export function poolFor(url: string): pg.Pool {
  return openPool(url, 3);
}
