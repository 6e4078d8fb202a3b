import pg from 'pg';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { Coordinator } from '../../policy/lease/coordinator.ts';
import { PERMIT_MS } from '../../policy/lease/lease-permit.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { Lifecycle } from './lifecycle.ts';

afterEach(() => {
  vi.restoreAllMocks();
});

/** A reader's Coordinator on a database that answers every lease call (no connection is made). */
async function readerLease(clock: ManualClock, timers: ManualTimers): Promise<Coordinator> {
  vi.spyOn(pg.Client.prototype, 'connect').mockImplementation(async () => {});
  vi.spyOn(pg.Client.prototype, 'end').mockImplementation(async () => {});
  vi.spyOn(pg.Client.prototype, 'query').mockImplementation((async (sql: string) => {
    if (sql.startsWith('SET ')) return { rows: [] };
    if (sql.includes('pg_try_advisory_lock')) return { rows: [{ ok: true }] };
    if (sql.includes('FROM arkvory_download_policy')) return { rows: [{ slots: 2, rate: '1000000', per: '0' }] };
    if (sql.includes('arkvory_lease_acquire')) return { rows: [{ generation: '1' }] };
    if (sql.includes('arkvory_lease_share')) return { rows: [{ share: '500000' }] };
    throw new Error(`unexpected query: ${sql}`);
  }) as never);
  return Coordinator.open({
    databaseUrl: 'postgres://unused@localhost/unused',
    role: 'reader',
    shared: { slot: 1, policy: { slots: 2, downloadBytesPerSec: 1_000_000, downloadBytesPerSecPerPrincipal: 0 } },
    clock,
    timers,
    log: pino({ level: 'silent' }),
  });
}

describe('Lifecycle following a slot lease', () => {
  it('is fenced once the permit lapsed, before the expiry timer has run (a busy loop, a pause the wall clock counted)', async () => {
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const lease = await readerLease(clock, timers);
    const lifecycle = new Lifecycle();
    lifecycle.follow(lease, 'lease lost');
    lifecycle.set('serving');
    expect(lifecycle.isServing).toBe(true);
    // Time passes with no timer run: the expiry check is late, its deadline gone.
    clock.advance(PERMIT_MS);
    expect(lifecycle.state).toBe('fenced');
    expect(lifecycle.isServing).toBe(false);
    expect(lifecycle.reason).toBe('lease lost');
    await lease.close();
  });

  it('is fenced when the lease is, and serves while the permit holds', async () => {
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    const lease = await readerLease(clock, timers);
    const lifecycle = new Lifecycle();
    const states: string[] = [];
    lifecycle.onChange((state) => states.push(state));
    lifecycle.follow(lease, 'lease lost');
    lifecycle.set('serving');
    // Renewals confirm every 2 s: a minute of them keeps it serving.
    await timers.advance(60_000);
    expect(lifecycle.isServing).toBe(true);
    vi.mocked(pg.Client.prototype.query).mockImplementation((async () => ({ rows: [{ share: null }] })) as never);
    await timers.advance(2_000);
    expect(lifecycle.state).toBe('fenced');
    expect(states).toEqual(['serving', 'fenced']);
    await lease.close();
  });
});
