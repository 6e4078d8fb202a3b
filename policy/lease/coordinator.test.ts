import pg from 'pg';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../clock.ts';
import { ManualTimers } from '../timers.ts';
import { Coordinator, type RenewalOutcome } from './coordinator.ts';
import { RENEW_AFTER_MS } from './lease-permit.ts';

const RATE = 3_000_000;
const policy = { slots: 3, downloadBytesPerSec: RATE, downloadBytesPerSecPerPrincipal: 0 };

afterEach(() => {
  vi.restoreAllMocks();
});

/**
 * A reader's Coordinator on a database that answers `arkvory_lease_share` with `answers`, one per
 * call (the first at the start), whatever they are. No connection is made: the client's connect,
 * query and end answer from here. Returns what each share call reported as the share in use.
 */
async function coordinatorAnswering(answers: Array<string | null>) {
  const reported: unknown[] = [];
  const logged: Array<{ level: number; msg: string }> = [];
  vi.spyOn(pg.Client.prototype, 'connect').mockImplementation(async () => {});
  vi.spyOn(pg.Client.prototype, 'end').mockImplementation(async () => {});
  vi.spyOn(pg.Client.prototype, 'query').mockImplementation((async (sql: string, params?: unknown[]) => {
    if (sql.startsWith('SET ')) return { rows: [] };
    if (sql.includes('pg_try_advisory_lock')) return { rows: [{ ok: true }] };
    if (sql.includes('FROM arkvory_download_policy'))
      return { rows: [{ slots: policy.slots, rate: String(RATE), per: '0' }] };
    if (sql.includes('arkvory_lease_acquire')) return { rows: [{ generation: '1' }] };
    if (sql.includes('arkvory_lease_share')) {
      reported.push(params?.[5]);
      if (answers.length === 0) throw new Error('no share answer left');
      return { rows: [{ share: answers.shift() }] };
    }
    throw new Error(`unexpected query: ${sql}`);
  }) as never);
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const log = pino(
    { level: 'warn' },
    { write: (line: string) => void logged.push(JSON.parse(line) as { level: number; msg: string }) },
  );
  const coordinator = await Coordinator.open({
    databaseUrl: 'postgres://unused@localhost/unused',
    role: 'reader',
    shared: { slot: 1, policy },
    clock,
    timers,
    log,
  });
  const shares: number[] = [];
  const outcomes: RenewalOutcome[] = [];
  const fenced: string[] = [];
  coordinator.onShare((share) => shares.push(share));
  coordinator.onRenewal((outcome) => outcomes.push(outcome));
  coordinator.onFenced((reason) => fenced.push(reason));
  return { coordinator, timers, reported, logged, shares, outcomes, fenced };
}

describe('Coordinator: the share answers it accepts', () => {
  it('pauses (0) on a share that is negative, not a number, fractional or beyond the rate, and never reports one back', async () => {
    const answers = ['1000000', '-1493261', 'NaN', '3000001', '1.5', 'Infinity', '500000'];
    const { coordinator, timers, reported, logged, shares, outcomes, fenced } = await coordinatorAnswering([
      ...answers,
    ]);
    expect(coordinator.shareBytesPerSec).toBe(1_000_000);
    for (let i = 1; i < answers.length; i++) {
      await timers.advance(RENEW_AFTER_MS);
      expect(coordinator.shareBytesPerSec).toBeGreaterThanOrEqual(0);
    }
    // Each renewal tells the database the share in use: never a negative, nor anything but a whole share.
    expect(reported).toEqual([0, 1_000_000, 0, 0, 0, 0, 0]);
    expect(shares).toEqual([0, 500_000]);
    expect(coordinator.shareBytesPerSec).toBe(500_000);
    expect(outcomes).toEqual(Array(answers.length - 1).fill('confirmed'));
    expect(fenced).toEqual([]);
    expect(coordinator.isPermitted()).toBe(true);
    expect(logged.filter((l) => /outside \[0, rate\]/.test(l.msg))).toHaveLength(5);
    await coordinator.close();
  });

  it('a negative share at the start is not applied either', async () => {
    const { coordinator, timers, reported } = await coordinatorAnswering(['-5', '7']);
    expect(coordinator.shareBytesPerSec).toBe(0);
    await timers.advance(RENEW_AFTER_MS);
    expect(reported).toEqual([0, 0]);
    expect(coordinator.shareBytesPerSec).toBe(7);
    await coordinator.close();
  });

  it('a share listener that throws costs neither the renewal nor the lease', async () => {
    const { coordinator, timers, outcomes, fenced, shares } = await coordinatorAnswering(['10', '20', '30']);
    coordinator.onShare(() => {
      throw new RangeError('listener bug');
    });
    await timers.advance(RENEW_AFTER_MS);
    await timers.advance(RENEW_AFTER_MS);
    expect(shares).toEqual([20, 30]);
    expect(outcomes).toEqual(['confirmed', 'confirmed']);
    expect(fenced).toEqual([]);
    expect(coordinator.isPermitted()).toBe(true);
    await coordinator.close();
  });
});

describe('Coordinator: a start answered after its permit lapsed', () => {
  /**
   * A reader's start on a database that takes `acquireMs` to answer the slot's acquire and `shareMs`
   * to answer its first share (the manual clock moves on meanwhile).
   */
  function openAnsweringLate(acquireMs: number, shareMs: number) {
    const logged: Array<{ level: number; msg: string }> = [];
    const clock = new ManualClock();
    const timers = new ManualTimers(clock);
    vi.spyOn(pg.Client.prototype, 'connect').mockImplementation(async () => {});
    vi.spyOn(pg.Client.prototype, 'end').mockImplementation(async () => {});
    vi.spyOn(pg.Client.prototype, 'query').mockImplementation((async (sql: string) => {
      if (sql.startsWith('SET ')) return { rows: [] };
      if (sql.includes('pg_try_advisory_lock')) return { rows: [{ ok: true }] };
      if (sql.includes('FROM arkvory_download_policy'))
        return { rows: [{ slots: policy.slots, rate: String(RATE), per: '0' }] };
      if (sql.includes('arkvory_lease_acquire')) {
        clock.advance(acquireMs);
        return { rows: [{ generation: '1' }] };
      }
      if (sql.includes('arkvory_lease_share')) {
        clock.advance(shareMs);
        return { rows: [{ share: '1000000' }] };
      }
      throw new Error(`unexpected query: ${sql}`);
    }) as never);
    const log = pino(
      { level: 'info' },
      { write: (line: string) => void logged.push(JSON.parse(line) as { level: number; msg: string }) },
    );
    const opened = Coordinator.open({
      databaseUrl: 'postgres://unused@localhost/unused',
      role: 'reader',
      shared: { slot: 1, policy },
      clock,
      timers,
      log,
    });
    return { opened, logged };
  }

  it('fails the start when the first share comes after the permit lapsed, rather than run fenced from its first moment', async () => {
    // Acquired at once; the first share answered 8 s after the acquire began: the permit has lapsed.
    const { opened, logged } = openAnsweringLate(0, 8_000);
    await expect(opened).rejects.toThrow(/slot 1 .*after its 8 s permit had lapsed/);
    // Refused as a start (a supervisor starts it again), never logged as a fence of a serving gateway.
    expect(logged.map((l) => l.msg)).not.toContainEqual(expect.stringMatching(/^fenced/));
  });

  it('fails the start when the acquire itself is answered after the permit lapsed', async () => {
    const { opened, logged } = openAnsweringLate(8_000, 0);
    await expect(opened).rejects.toThrow(/slot 1 .*after its 8 s permit had lapsed/);
    expect(logged.map((l) => l.msg)).not.toContainEqual(expect.stringMatching(/^fenced/));
  });

  it('starts when the first share comes within the permit', async () => {
    const { opened } = openAnsweringLate(3_000, 4_999);
    const coordinator = await opened;
    expect(coordinator.isPermitted()).toBe(true);
    expect(coordinator.shareBytesPerSec).toBe(1_000_000);
    await coordinator.close();
  });
});
