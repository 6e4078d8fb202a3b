import * as crypto from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { QueryTokens } from './query-tokens.ts';

// Watched, not replaced: the comparisons the tokens make are seen with their real outcome.
vi.mock('node:crypto', async (original) => {
  const real = await original<typeof import('node:crypto')>();
  return { ...real, timingSafeEqual: vi.fn(real.timingSafeEqual) };
});

const GRACE_MS = 600_000;
const bearer = (t: string) => `Bearer ${t}`;

describe('the rules-service query token and its rotation grace', () => {
  it('without a token the route is open; with one, only that token passes', () => {
    const clock = new ManualClock();
    expect(new QueryTokens(undefined, GRACE_MS).accepts(undefined, clock.monotonicMs())).toBe(true);
    const tokens = new QueryTokens('old-token', GRACE_MS);
    expect(tokens.required).toBe(true);
    expect(tokens.accepts(bearer('old-token'), clock.monotonicMs())).toBe(true);
    for (const wrong of [undefined, '', 'old-token', 'Bearer old-toke', 'Bearer old-tokenX', 'Basic old-token', 42])
      expect(tokens.accepts(wrong, clock.monotonicMs()), String(wrong)).toBe(false);
  });

  it('after a rotation the previous token passes until exactly the grace has passed, the new one always', () => {
    const clock = new ManualClock(1_700_000_000_000, 5_000);
    const tokens = new QueryTokens('old-token', GRACE_MS);
    const rotatedAt = clock.monotonicMs();
    tokens.rotate('new-token', rotatedAt);
    expect(tokens.previousAcceptedUntil(clock.monotonicMs())).toBe(rotatedAt + GRACE_MS);
    clock.advance(GRACE_MS - 1);
    expect(tokens.accepts(bearer('old-token'), clock.monotonicMs())).toBe(true);
    expect(tokens.accepts(bearer('new-token'), clock.monotonicMs())).toBe(true);
    clock.advance(1);
    // The grace is exclusive at its end: at rotation + grace the old token is refused.
    expect(clock.monotonicMs()).toBe(rotatedAt + GRACE_MS);
    expect(tokens.accepts(bearer('old-token'), clock.monotonicMs())).toBe(false);
    expect(tokens.previousAcceptedUntil(clock.monotonicMs())).toBeUndefined();
    expect(tokens.accepts(bearer('new-token'), clock.monotonicMs())).toBe(true);
  });

  it('a grace of 0 ends the old token at once; a second rotation within the grace drops the first token', () => {
    const clock = new ManualClock();
    const strict = new QueryTokens('a', 0);
    strict.rotate('b', clock.monotonicMs());
    expect(strict.accepts(bearer('a'), clock.monotonicMs())).toBe(false);
    expect(strict.accepts(bearer('b'), clock.monotonicMs())).toBe(true);

    const tokens = new QueryTokens('a', GRACE_MS);
    tokens.rotate('b', clock.monotonicMs());
    clock.advance(1000);
    tokens.rotate('c', clock.monotonicMs());
    expect(tokens.accepts(bearer('a'), clock.monotonicMs())).toBe(false);
    expect(tokens.accepts(bearer('b'), clock.monotonicMs())).toBe(true);
    expect(tokens.previousAcceptedUntil(clock.monotonicMs())).toBe(1000 + GRACE_MS);
    // Rotating to the token in use changes nothing: the grace of `b` is not extended.
    clock.advance(GRACE_MS - 1);
    tokens.rotate('c', clock.monotonicMs());
    clock.advance(1);
    expect(tokens.accepts(bearer('b'), clock.monotonicMs())).toBe(false);
  });

  it('takes the scheme in any case and after any number of blanks (RFC 9110 §11.1), the token as it is', () => {
    const clock = new ManualClock();
    const tokens = new QueryTokens('s3cret token', GRACE_MS);
    for (const header of ['bearer s3cret token', 'BEARER s3cret token', 'BeArEr s3cret token', 'Bearer   s3cret token'])
      expect(tokens.accepts(header, clock.monotonicMs()), header).toBe(true);
    for (const header of ['Bearers3cret token', 'bearer S3CRET TOKEN', 'Bearer', 'Bearer ', 'Token s3cret token'])
      expect(tokens.accepts(header, clock.monotonicMs()), header).toBe(false);
  });

  it('a rotation to no token (the setting gone or empty on a reload) leaves the route closed to all but the token', () => {
    const clock = new ManualClock();
    const tokens = new QueryTokens('kept-token', GRACE_MS);
    for (const gone of [undefined, '']) {
      expect(tokens.rotate(gone, clock.monotonicMs())).toBe(false);
      expect(tokens.required).toBe(true);
      expect(tokens.accepts(undefined, clock.monotonicMs())).toBe(false);
      expect(tokens.accepts(bearer('anything'), clock.monotonicMs())).toBe(false);
      expect(tokens.accepts(bearer('kept-token'), clock.monotonicMs())).toBe(true);
      expect(tokens.previousAcceptedUntil(clock.monotonicMs())).toBeUndefined();
    }
  });

  it("compares whatever was sent in full, at one fixed size: the time taken does not tell the token's length", () => {
    const clock = new ManualClock();
    const tokens = new QueryTokens('current-token', 0);
    tokens.rotate('another-token', clock.monotonicMs());
    const compare = vi.mocked(crypto.timingSafeEqual);
    for (const sent of [bearer('x'), bearer('current-tokex'), bearer('y'.repeat(300)), 'Basic eDp5', undefined]) {
      compare.mockClear();
      expect(tokens.accepts(sent, clock.monotonicMs())).toBe(false);
      // The current token and the previous one, each compared once, as 32-byte digests whatever the length sent.
      expect(compare, String(sent)).toHaveBeenCalledTimes(2);
      for (const [a, b] of compare.mock.calls) {
        expect((a as Buffer).length).toBe(32);
        expect((b as Buffer).length).toBe(32);
      }
    }
  });
});
