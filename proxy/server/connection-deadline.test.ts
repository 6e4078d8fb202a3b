import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { ConnectionDeadline, onConnectionWithin } from './connection-deadline.ts';

/** A pool whose connections arrive when the test says, and which records how each came back. */
function pool() {
  const released: Array<Error | undefined> = [];
  let arrive: () => void = () => {};
  const conn = { release: (err?: Error) => void released.push(err), on: () => conn, off: () => conn };
  return {
    released,
    arrive: () => arrive(),
    connect: () => new Promise<typeof conn>((resolve) => (arrive = () => resolve(conn))),
  };
}

describe('onConnectionWithin', () => {
  function setup() {
    const clock = new ManualClock();
    return { timers: new ManualTimers(clock), p: pool() };
  }

  it('gives the connection back after work that succeeded in time', async () => {
    const { timers, p } = setup();
    const done = onConnectionWithin(p, 1000, async () => 'ok', { timers });
    p.arrive();
    expect(await done).toBe('ok');
    expect(p.released).toEqual([undefined]);
    expect(timers.size).toBe(0);
  });

  it('ends the connection of work still waiting at the deadline, and fails with ConnectionDeadline', async () => {
    const { timers, p } = setup();
    const done = onConnectionWithin(p, 1000, (_c, within) => within(new Promise(() => {})), { timers });
    const failed = done.catch((err: unknown) => err);
    p.arrive();
    await timers.advance(999);
    expect(p.released).toEqual([]);
    await timers.advance(1);
    expect(await failed).toBeInstanceOf(ConnectionDeadline);
    expect(p.released).toHaveLength(1);
    expect(p.released[0]).toBeInstanceOf(ConnectionDeadline);
  });

  it('gives back unused a connection that arrives after the deadline', async () => {
    const { timers, p } = setup();
    const failed = onConnectionWithin(p, 1000, async () => 'never', { timers }).catch((err: unknown) => err);
    await timers.advance(1000);
    expect(await failed).toBeInstanceOf(ConnectionDeadline);
    p.arrive();
    await timers.advance(0);
    expect(p.released).toEqual([undefined]);
  });

  it('ends at once when abandoned, as at its deadline', async () => {
    const { timers, p } = setup();
    let abandon: () => void = () => {};
    const failed = onConnectionWithin(p, 60_000, (_c, within) => within(new Promise(() => {})), {
      timers,
      onAbandon: (end) => (abandon = end),
    }).catch((err: unknown) => err);
    p.arrive();
    await timers.advance(0);
    abandon();
    expect(await failed).toBeInstanceOf(ConnectionDeadline);
    expect(p.released[0]).toBeInstanceOf(ConnectionDeadline);
  });
});
