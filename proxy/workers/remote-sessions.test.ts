/**
 * A worker's sessions over a link to the table of the coordinating process, on an in-memory channel
 * pair and a hand-moved clock: what one worker opens every other finds, marks used and ends for
 * all (a lookup alone is no use); a call the other side does not answer in time, or a closed link, is 503 `unavailable`,
 * never a session.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ConsoleSessions } from '../console/sessions.ts';
import { Link } from './link.ts';
import { channelPair } from '../../test/support/ipc-channel.ts';
import { remoteSessionStore, serveSessions } from './remote-sessions.ts';

const admin = { id: 'p1', name: 'admin' };

function instance(clock: ManualClock) {
  let n = 0;
  const table = new ConsoleSessions({
    clock,
    ttlMs: 60_000,
    idleMs: 10_000,
    maxSessions: 10,
    randomToken: () => `token_${String(n++).padStart(20, '0')}`,
  });
  const workers = [0, 1].map(() => {
    const { worker, primary } = channelPair();
    serveSessions(new Link(primary), table);
    return remoteSessionStore(new Link(worker));
  });
  return { table, workers };
}

describe('sessions over the link', () => {
  it('are the instance’s: opened on one worker, found, kept alive and ended on the other', async () => {
    const clock = new ManualClock();
    const { table, workers } = instance(clock);
    const [w0, w1] = workers as [ReturnType<typeof remoteSessionStore>, ReturnType<typeof remoteSessionStore>];
    const created = await w0.create(admin, 'Bearer ark_x');
    expect(table.size).toBe(1);
    const found = await w1.get(created.id);
    expect(found).toEqual(created);
    // An action on either worker counts against the instance's idle bound.
    for (let i = 0; i < 4; i++) {
      clock.advance(9_000);
      await (i % 2 ? w0 : w1).touch(created.id);
      expect(await (i % 2 ? w1 : w0).get(created.id)).toBeDefined();
    }
    expect((await w0.get(created.id))?.expiresInSeconds).toBe(24);
    // Lookups alone (the page polling) are no use: the session idles out 10 s after the last action.
    clock.advance(9_000);
    expect(await w0.get(created.id)).toBeDefined();
    clock.advance(1_000);
    expect(await w1.get(created.id)).toBeUndefined();
    await w0.touch(created.id);
    expect(await w0.get(created.id)).toBeUndefined();
    const again = await w0.create(admin, 'Bearer ark_x');
    await w1.delete(again.id);
    expect(await w0.get(again.id)).toBeUndefined();
    expect(await w1.get(again.id)).toBeUndefined();
    expect(table.size).toBe(0);
  });

  it('looks nothing up for a malformed or missing id', async () => {
    const clock = new ManualClock();
    const { workers } = instance(clock);
    expect(await workers[0]!.get(undefined)).toBeUndefined();
    expect(await workers[0]!.get('short')).toBeUndefined();
  });

  it('is 503 unavailable, not a session, when the coordinating process does not answer in time', async () => {
    const clock = new ManualClock();
    const table = new ConsoleSessions({ clock, ttlMs: 60_000, idleMs: 10_000, maxSessions: 10 });
    const { worker, primary, stop } = channelPair();
    stop();
    serveSessions(new Link(primary), table);
    const store = remoteSessionStore(new Link(worker), 20);
    const created = table.create(admin, 'Bearer ark_x');
    await expect(store.get(created.id)).rejects.toMatchObject({ code: 'unavailable', headers: { 'retry-after': '1' } });
    await expect(store.create(admin, 'Bearer ark_y')).rejects.toMatchObject({ code: 'unavailable' });
    await expect(store.touch(created.id)).rejects.toMatchObject({ code: 'unavailable' });
    await expect(store.delete(created.id)).rejects.toMatchObject({ code: 'unavailable' });
    expect(table.size).toBe(1);
  });

  it('is 503 unavailable once the link is closed (the coordinating process is gone)', async () => {
    const { worker } = channelPair();
    const link = new Link(worker);
    link.close();
    const store = remoteSessionStore(link);
    await expect(store.get('token_00000000000000000000')).rejects.toMatchObject({ code: 'unavailable' });
  });

  it('drops a session whose creation answered after the worker gave up', async () => {
    const clock = new ManualClock();
    const table = new ConsoleSessions({ clock, ttlMs: 60_000, idleMs: 10_000, maxSessions: 10 });
    const { worker, primary } = channelPair();
    const primaryLink = new Link(primary);
    serveSessions(primaryLink, table);
    // The create is answered only after the worker's deadline.
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    primaryLink.handle('sessions.create', async (args) => {
      await answered;
      const { principal, authorization } = args as { principal: typeof admin; authorization: string };
      made++;
      return table.create(principal, authorization);
    });
    let made = 0;
    const store = remoteSessionStore(new Link(worker), 20);
    await expect(store.create(admin, 'Bearer ark_x')).rejects.toMatchObject({ code: 'unavailable' });
    answer();
    for (let i = 0; i < 100 && (made === 0 || table.size > 0); i++) await new Promise((r) => setImmediate(r));
    expect(made).toBe(1);
    expect(table.size).toBe(0);
  });
});
