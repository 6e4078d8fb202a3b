/**
 * Exempts a connection of its own that must stay open while idle (a barrier or lock holder, a
 * LISTEN) from the database's `idle_session_timeout` (PostgreSQL 14+): a server that sets it would
 * end the session, and with it the locks it holds or the notifications it waits for. A server
 * without the setting (before PostgreSQL 14) ends no idle session.
 */
import type pg from 'pg';

/** SQLSTATE 42704 undefined_object: what SET answers for a setting the server does not know. */
const UNDEFINED_SETTING = '42704';

export async function keepIdleSession(client: Pick<pg.ClientBase, 'query'>): Promise<void> {
  try {
    await client.query('SET idle_session_timeout = 0');
  } catch (err) {
    if ((err as { code?: string }).code !== UNDEFINED_SETTING) throw err;
  }
}
