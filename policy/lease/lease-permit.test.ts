import { describe, expect, it } from 'vitest';
import { acquired, confirmRenewal, isPermitValid, nextRenewalAt, observe, renewalRejected, type Instant } from './lease-permit.ts';

const at = (monotonicMs: number, wallMs = 1_000_000 + monotonicMs): Instant => ({ monotonicMs, wallMs });

describe('lease permit', () => {
  it('lasts 8 s from the start of the acquiring request, waiting included', () => {
    const s = acquired(1, at(0), at(300));
    expect(isPermitValid(s, at(7999))).toBe(true);
    expect(isPermitValid(s, at(8000))).toBe(false);
    expect(nextRenewalAt(s)).toBe(2000);
  });

  it('renews 2 s after the last confirmation and extends to 8 s after the renewal request started', () => {
    let s = acquired(1, at(0), at(10));
    s = confirmRenewal(s, at(2000), at(2600)); // slow answer: still counted from 2000
    expect(s.kind).toBe('held');
    expect(isPermitValid(s, at(9999))).toBe(true);
    expect(isPermitValid(s, at(10_000))).toBe(false);
    expect(nextRenewalAt(s)).toBe(4000);
  });

  it('fences on expiry and never revives on a late renewal answer', () => {
    let s = acquired(1, at(0), at(10));
    // The renewal started at 2000 but its answer arrives at 8500, after the permit lapsed at 8000.
    s = confirmRenewal(s, at(2000), at(8500));
    expect(s.kind).toBe('fenced');
    s = confirmRenewal(s, at(9000), at(9001));
    expect(s.kind).toBe('fenced');
    expect(isPermitValid(s, at(9002))).toBe(false);
  });

  it('an answer that itself arrives more than 8 s after its request fences even inside the old permit', () => {
    let s = acquired(1, at(0), at(10));
    s = confirmRenewal(s, at(2000), at(3000));
    s = confirmRenewal(s, at(4000), at(9500)); // old permit valid until 10000, new one until 12000: fine
    expect(s.kind).toBe('held');
    s = confirmRenewal(s, at(100), at(9600)); // a request started long ago: its permit (8100) has lapsed
    expect(s.kind).toBe('fenced');
  });

  it('a paused process (no progress for 12 s) stays fenced when it resumes', () => {
    let s = acquired(1, at(0), at(10));
    s = confirmRenewal(s, at(2000), at(2010));
    // Paused from 2010 to 14010: the first thing it does is look at the clock.
    s = observe(s, at(14_010));
    expect(s.kind).toBe('fenced');
    s = confirmRenewal(s, at(14_010), at(14_020));
    expect(s.kind).toBe('fenced');
  });

  it('checks wall time too: a wall clock jump past the permit fences', () => {
    const s = acquired(1, at(0, 1000), at(10, 1010));
    expect(isPermitValid(s, at(100, 1100))).toBe(true);
    expect(isPermitValid(s, at(100, 9001))).toBe(false);
    expect(observe(s, at(100, 9001)).kind).toBe('fenced');
  });

  it('a rejected renewal (generation moved on) fences', () => {
    const s = renewalRejected(acquired(3, at(0), at(1)));
    expect(s.kind).toBe('fenced');
    expect(nextRenewalAt(s)).toBeUndefined();
  });
});
