import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  databaseTarget,
  isUnreachable,
  startupRetryDelayMs,
  waitForDatabase,
  type WaitForDatabaseOptions,
} from './database.ts';
import { isConnectionLost } from '../../lib/connection-loss.ts';
import { DatabaseUnavailable } from '../../lib/statement-deadline.ts';
import { toHttpError } from './http-errors.ts';

const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });

/** A probe failing `failures` times, on a clock that only the sleeps move. */
function harness(failures: number, boundMs: number, error: () => Error = refused) {
  let nowMs = 0;
  const sleeps: number[] = [];
  let calls = 0;
  const options: WaitForDatabaseOptions = {
    boundMs,
    target: '127.0.0.1:5432',
    log: pino({ level: 'silent' }),
    monotonicMs: () => nowMs,
    sleep: async (ms) => {
      sleeps.push(ms);
      nowMs += ms;
    },
    signal: new AbortController().signal,
  };
  const probe = async () => {
    calls++;
    if (calls <= failures) throw error();
  };
  return { options, probe, sleeps, calls: () => calls };
}

describe('startup wait for PostgreSQL', () => {
  it('backs off 250 ms doubling to a 5 s ceiling', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 10].map(startupRetryDelayMs)).toEqual([250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
  });

  it('retries connection failures and starts when the database answers', async () => {
    const h = harness(3, 60_000);
    expect(await waitForDatabase(h.probe, h.options)).toBe('reachable');
    expect(h.sleeps).toEqual([250, 500, 1000]);
    expect(h.calls()).toBe(4);
  });

  it('gives up once the bound has passed, the last wait cut to the bound', async () => {
    const h = harness(Number.POSITIVE_INFINITY, 3000);
    await expect(waitForDatabase(h.probe, h.options)).rejects.toMatchObject({
      code: 'database_unreachable',
      attempts: 5,
      message: expect.stringContaining('ARKVORY_DATABASE_STARTUP_WAIT_SECONDS=3'),
    });
    expect(h.sleeps).toEqual([250, 500, 1000, 1250]);
  });

  it('fails at once with a bound of 0, and on errors that retrying cannot fix', async () => {
    const none = harness(1, 0);
    await expect(waitForDatabase(none.probe, none.options)).rejects.toMatchObject({
      code: 'database_unreachable',
      attempts: 1,
    });
    const auth = harness(1, 60_000, () =>
      Object.assign(new Error('password authentication failed'), { code: '28P01' }),
    );
    await expect(waitForDatabase(auth.probe, auth.options)).rejects.toMatchObject({ code: '28P01' });
    expect(auth.sleeps).toEqual([]);
  });

  it('stops waiting when the process is asked to stop', async () => {
    const h = harness(Number.POSITIVE_INFINITY, 60_000);
    const controller = new AbortController();
    h.options.signal = controller.signal;
    h.options.sleep = async () => controller.abort();
    expect(await waitForDatabase(h.probe, h.options)).toBe('stopped');
  });

  it('tells unreachable from refused, and logs host:port only', () => {
    expect(isUnreachable(refused())).toBe(true);
    expect(isUnreachable(Object.assign(new Error('the database system is starting up'), { code: '57P03' }))).toBe(true);
    expect(isUnreachable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isUnreachable(Object.assign(new Error('database "x" does not exist'), { code: '3D000' }))).toBe(false);
    expect(isUnreachable(new DatabaseUnavailable('the database did not give a connection within 5000 ms'))).toBe(true);
    expect(databaseTarget('postgres://u:secret@db.example:6543/x')).toBe('db.example:6543');
  });
});

describe('a statement past the gateway deadline', () => {
  const expired = new DatabaseUnavailable(
    'the database did not answer a statement within 5000 ms',
    new Error('Connection terminated unexpectedly'),
  );

  it('answers 503 unavailable with its message and a Retry-After', () => {
    expect(toHttpError(expired)).toMatchObject({
      status: 503,
      code: 'unavailable',
      message: 'the database did not answer a statement within 5000 ms',
      headers: { 'retry-after': '1' },
    });
  });

  it('is not run again on a new connection as a connection lost while idle would be', () => {
    expect(isConnectionLost(expired)).toBe(false);
    expect(isConnectionLost(expired.cause)).toBe(true);
  });
});
