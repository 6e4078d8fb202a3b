/**
 * PgClient and libpq's `require_auth`, against what listens where a PostgreSQL was: a server that
 * asks for the password in clear text, one that lets any client in without a challenge, and the
 * real PostgreSQL of the harness (SCRAM), which the same URL still reaches.
 */
import { describe, expect, it } from 'vitest';
import { catchPasswords } from '../test/support/password-catcher.ts';
import { useTestDatabase } from '../test/support/database.ts';
import { PgClient } from './pg-client.ts';

const db = useTestDatabase();
const PASSWORD = 'never-sent-in-clear-0123456789';

async function connectTo(url: string): Promise<Error | undefined> {
  const client = new PgClient({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (err) {
    return err as Error;
  } finally {
    await client.end().catch(() => {});
  }
}

describe('a PgClient whose URL requires SCRAM (require_auth=scram-sha-256)', () => {
  it('sends a server asking for the password in clear text nothing, and fails database_auth_refused', async () => {
    const catcher = await catchPasswords();
    try {
      const url = `postgres://postgres:${PASSWORD}@127.0.0.1:${catcher.port}/postgres`;
      const err = await connectTo(`${url}?require_auth=scram-sha-256`);
      expect(err).toMatchObject({ code: 'database_auth_refused', message: expect.stringContaining('password') });
      expect(catcher.received()).not.toContain(PASSWORD);
      // The same URL without the requirement is what pg does by itself: the password, in clear.
      await connectTo(url);
      expect(catcher.received()).toContain(PASSWORD);
    } finally {
      await catcher.close();
    }
  });

  it('refuses a server that lets it in without any challenge, before sending it a statement', async () => {
    const catcher = await catchPasswords(0, 0, true);
    try {
      const err = await connectTo(
        `postgres://postgres:${PASSWORD}@127.0.0.1:${catcher.port}/postgres?require_auth=scram-sha-256`,
      );
      expect(err).toMatchObject({ code: 'database_auth_refused' });
      expect(catcher.received()).not.toContain('SELECT 1');
    } finally {
      await catcher.close();
    }
  });

  it('reaches the real PostgreSQL, which proves it knows the password', async () => {
    const url = new URL(db.url);
    url.searchParams.set('require_auth', 'scram-sha-256');
    expect(await connectTo(url.href)).toBeUndefined();
    // A requirement the real server does not meet fails as clearly.
    url.searchParams.set('require_auth', 'password');
    expect(await connectTo(url.href)).toMatchObject({ code: 'database_auth_refused' });
  });
});
