import { describe, expect, it } from 'vitest';
import {
  acquired,
  confirmRenewal,
  isPermitValid,
  nextRenewalAt,
  observe,
  renewalRejected,
  type Instant,
} from './lease-permit.ts';

const at = (monotonicMs: number, wallMs = 1_000_000 + monotonicMs): Instant => ({ monotonicMs, wallMs });

describe('lease permit', () => {
  it('lasts 8 s from the start of the acquiring request, waiting included; renewal 2 s after the confirmation arrived', () => {
    const s = acquired(1, at(0), at(300));
    expect(isPermitValid(s, at(7999))).toBe(true);
    expect(isPermitValid(s, at(8000))).toBe(false);
    // Spec: "Renewal starts 2 seconds after the previous successful confirmation": the answer at 300.
    expect(nextRenewalAt(s)).toBe(2300);
  });

  it('renews 2 s after the last confirmation; the permit extends to 8 s after the renewal request started', () => {
    let s = acquired(1, at(0), at(10));
    expect(nextRenewalAt(s)).toBe(2010);
    s = confirmRenewal(s, at(2010), at(2600)); // slow answer: the permit still counts from 2010
    expect(s.kind).toBe('held');
    expect(isPermitValid(s, at(10_009))).toBe(true);
    expect(isPermitValid(s, at(10_010))).toBe(false);
    expect(nextRenewalAt(s)).toBe(4600); // …but the next renewal from the confirmation at 2600
  });

  it('keeps the 8 s bound whatever the answer times: a permit never outlives its request start by 8 s', () => {
    // A chain of renewals whose answers take 0 to 3 s: each starts 2 s after the previous answer.
    let s = acquired(1, at(0), at(0));
    for (const delay of [0, 100, 3000, 1000, 50]) {
      const begin = nextRenewalAt(s)!;
      s = confirmRenewal(s, at(begin), at(begin + delay));
      expect(s.kind).toBe('held');
      if (s.kind !== 'held') return;
      expect(s.validUntil.monotonicMs).toBe(begin + 8000);
      expect(nextRenewalAt(s)).toBe(begin + delay + 2000);
    }
    // The previous permit (from the request before, 8 s) ends 5.95 s into this request: an answer at
    // 5.9 s is held and the next renewal (2 s later) still starts inside the new permit; an answer at
    // 6 s comes after the old permit lapsed and fences. No permit is ever valid 8 s past its start.
    const begin = nextRenewalAt(s)!;
    const late = confirmRenewal(s, at(begin), at(begin + 6000));
    expect(late.kind).toBe('fenced');
    s = confirmRenewal(s, at(begin), at(begin + 5900));
    expect(s.kind).toBe('held');
    expect(nextRenewalAt(s)).toBe(begin + 7900);
    expect(isPermitValid(s, at(begin + 7999))).toBe(true);
    expect(observe(s, at(begin + 8000)).kind).toBe('fenced');
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
    expect(s).toEqual({
      kind: 'fenced',
      reason: 'the database no longer holds this lease (expired or taken over by a newer generation)',
    });
    expect(nextRenewalAt(s)).toBeUndefined();
    // Time passing keeps the reason it was fenced for.
    expect(observe(s, at(60_000))).toBe(s);
  });

  it('each clock alone ends the permit, at exactly 8 s after the request start', () => {
    const s = acquired(1, at(0, 1000), at(10, 1010));
    // Monotonic at the deadline, wall time behind (a wall clock stepped back): lapsed.
    expect(isPermitValid(s, at(8000, 1000))).toBe(false);
    expect(isPermitValid(s, at(7999, 1000))).toBe(true);
    // Wall time at the deadline, monotonic behind: lapsed.
    expect(isPermitValid(s, at(100, 9000))).toBe(false);
    expect(isPermitValid(s, at(100, 8999))).toBe(true);
    expect(observe(s, at(8000, 1000))).toEqual({
      kind: 'fenced',
      reason: 'the lease permit expired before a renewal was confirmed',
    });
  });
});
