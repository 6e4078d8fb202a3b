import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import {
  disabledSince,
  ConsoleSessions,
  clearedSessionCookie,
  csrfMatches,
  readCookie,
  readSessionId,
  sessionCookie,
} from './sessions.ts';

function sessions(clock: ManualClock, maxSessions = 10) {
  let n = 0;
  const token = () => `token_${String(n++).padStart(20, '0')}`;
  return new ConsoleSessions({ clock, ttlMs: 60_000, idleMs: 10_000, maxSessions, randomToken: token });
}
const admin = { id: 'p1', name: 'admin' };

describe('ConsoleSessions', () => {
  it('finds a session by id until it idles out, each action restarting the idle clock', () => {
    const clock = new ManualClock();
    const s = sessions(clock);
    const created = s.create(admin, 'Bearer ark_x');
    expect(s.get(created.id)?.principalName).toBe('admin');
    clock.advance(9_999);
    s.touch(created.id);
    expect(s.get(created.id)).toBeDefined();
    clock.advance(9_999);
    expect(s.get(created.id)).toBeDefined();
    clock.advance(1);
    expect(s.get(created.id)).toBeUndefined();
    expect(s.size).toBe(0);
  });

  it('lets a session that is only looked up (the page polling) idle out: a lookup is not a use', () => {
    const clock = new ManualClock();
    const s = sessions(clock);
    const polled = s.create(admin, 'Bearer ark_x');
    const acted = s.create(admin, 'Bearer ark_y');
    // Both are polled every second; only one also sees an operator's action every 5 s.
    for (let ms = 1_000; ms < 10_000; ms += 1_000) {
      clock.advance(1_000);
      expect(s.get(polled.id)).toBeDefined();
      expect(s.get(acted.id)).toBeDefined();
      if (ms % 5_000 === 0) s.touch(acted.id);
    }
    clock.advance(1_000);
    expect(s.get(polled.id)).toBeUndefined();
    expect(s.get(acted.id)).toBeDefined();
    // An ended session stays ended: a late action does not bring it back.
    s.touch(polled.id);
    expect(s.get(polled.id)).toBeUndefined();
  });

  it('ends a session at its absolute lifetime even while in use', () => {
    const clock = new ManualClock();
    const s = sessions(clock);
    const created = s.create(admin, 'Bearer ark_x');
    expect(created.expiresInSeconds).toBe(60);
    for (let i = 0; i < 5; i++) {
      clock.advance(9_000);
      s.touch(created.id);
      expect(s.get(created.id)).toBeDefined();
    }
    expect(s.get(created.id)?.expiresInSeconds).toBe(15);
    clock.advance(15_000);
    expect(s.get(created.id)).toBeUndefined();
  });

  it('drops the least recently used session beyond the bound, and unknown or malformed ids find nothing', () => {
    const clock = new ManualClock();
    const s = sessions(clock, 2);
    const a = s.create(admin, 'a');
    const b = s.create(admin, 'b');
    s.get(b.id); // a lookup leaves the order alone: b is still the most recently used
    s.touch(a.id);
    const c = s.create(admin, 'c');
    expect(s.get(b.id)).toBeUndefined();
    expect(s.get(a.id)).toBeDefined();
    expect(s.get(c.id)).toBeDefined();
    expect(s.get('nope')).toBeUndefined();
    expect(s.get(undefined)).toBeUndefined();
    expect(s.get({ id: a.id })).toBeUndefined();
    s.delete(a.id);
    expect(s.get(a.id)).toBeUndefined();
  });

  it('hands out plain data: no clock state, and a copy that a caller cannot use to extend the session', () => {
    const clock = new ManualClock();
    const s = sessions(clock);
    const created = s.create(admin, 'Bearer ark_x');
    expect(Object.keys(created).sort()).toEqual([
      'authorization',
      'csrfToken',
      'expiresInSeconds',
      'id',
      'principalDisabledAtMs',
      'principalId',
      'principalName',
    ]);
    (created as { expiresInSeconds: number }).expiresInSeconds = 1e9;
    clock.advance(60_000);
    expect(s.get(created.id)).toBeUndefined();
  });

  it('voids a session only for a disable later than the one its sign-in saw, whatever the clocks', () => {
    const clock = new ManualClock();
    const s = sessions(clock);
    const never = s.create(admin, 'Bearer ark_x');
    const once = s.create({ ...admin, disabledAtMs: 5_000 }, 'Bearer ark_x');
    expect(never.principalDisabledAtMs).toBeNull();
    expect(once.principalDisabledAtMs).toBe(5_000);
    // The gateway's clock plays no part: far ahead of the database's, a later disable still voids.
    clock.advance(3_600_000);
    expect(disabledSince(never, undefined)).toBe(false);
    expect(disabledSince(never, 1)).toBe(true);
    expect(disabledSince(once, 5_000)).toBe(false);
    expect(disabledSince(once, 5_001)).toBe(true);
    // A cache a little behind the sign-in's read (an earlier disable, or none) voids nothing.
    expect(disabledSince(once, 4_000)).toBe(false);
    expect(disabledSince(once, undefined)).toBe(false);
  });

  it('compares the CSRF token exactly', () => {
    const s = sessions(new ManualClock());
    const created = s.create(admin, 'a');
    expect(csrfMatches(created, created.csrfToken)).toBe(true);
    expect(csrfMatches(created, `${created.csrfToken}x`)).toBe(false);
    expect(csrfMatches(created, created.csrfToken.replace(/.$/, 'Z'))).toBe(false);
    expect(csrfMatches(created, undefined)).toBe(false);
    expect(csrfMatches(created, [created.csrfToken])).toBe(false);
  });
});

describe('cookies', () => {
  it('reads one cookie out of a header', () => {
    expect(readCookie('a=1; arkvory_console=abc; b=2', 'arkvory_console')).toBe('abc');
    expect(readCookie('a=1', 'arkvory_console')).toBeUndefined();
    expect(readCookie(undefined, 'arkvory_console')).toBeUndefined();
  });

  it('sets HttpOnly, SameSite=Strict, Path=/console over plain HTTP, and no Max-Age (kept in memory only)', () => {
    expect(sessionCookie('id', false)).toBe('arkvory_console=id; Path=/console; HttpOnly; SameSite=Strict');
    expect(clearedSessionCookie(false)).toBe('arkvory_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0');
  });

  // A browser keeps a __Host- cookie only with Secure, Path=/ and no Domain (RFC 6265bis 4.1.3.2).
  it('is __Host-arkvory_console with Secure, Path=/ and no Domain when Secure, set and cleared alike', () => {
    expect(sessionCookie('id', true)).toBe('__Host-arkvory_console=id; Path=/; HttpOnly; SameSite=Strict; Secure');
    expect(clearedSessionCookie(true)).toBe(
      '__Host-arkvory_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure',
    );
  });

  it('reads only the name the transport allows: the plain one never over https, the prefixed one never in clear', () => {
    const both = 'arkvory_console=tossed; __Host-arkvory_console=real';
    expect(readSessionId(both, true)).toBe('real');
    expect(readSessionId('arkvory_console=tossed', true)).toBeUndefined();
    expect(readSessionId(both, false)).toBe('tossed');
    expect(readSessionId('__Host-arkvory_console=real', false)).toBeUndefined();
  });
});
