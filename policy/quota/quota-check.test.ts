import { describe, expect, it } from 'vitest';
import { nextReservationBytes, quotaExceeded, quotaRefusal, type QuotaState } from './quota-check.ts';

const repo = (limitBytes: number, storedBytes: number, reservedBytes: number): QuotaState => ({
  scope: 'repository',
  subject: 'libs',
  limitBytes,
  storedBytes,
  reservedBytes,
});

describe('quota checks', () => {
  it.each<[string, QuotaState, number, number | undefined]>([
    ['exactly filling the quota fits', repo(100, 60, 30), 10, undefined],
    ['one byte more does not; remaining is what is left', repo(100, 60, 30), 11, 10],
    ['an empty upload fits a full quota', repo(100, 70, 30), 0, undefined],
    ['over a quota lowered below its usage: remaining 0', repo(50, 70, 30), 1, 0],
    ['a zero quota refuses any byte', repo(0, 0, 0), 1, 0],
  ])('%s', (_name, state, requested, remaining) => {
    const refusal = quotaRefusal([state], requested);
    if (remaining === undefined) expect(refusal).toBeUndefined();
    else
      expect(refusal).toEqual({
        state,
        requestedBytes: requested,
        usageBytes: state.storedBytes + state.reservedBytes,
        remainingBytes: remaining,
      });
  });

  it('the first quota that would be exceeded is the one reported', () => {
    const principal: QuotaState = { ...repo(10, 0, 0), scope: 'principal', subject: 'p' };
    expect(quotaRefusal([repo(100, 0, 0), principal], 11)?.state).toBe(principal);
    expect(quotaRefusal([repo(5, 0, 0), principal], 11)?.state.scope).toBe('repository');
    expect(quotaRefusal([], 11)).toBeUndefined();
  });

  it('a reservation pinned to a blob asks for what it adds: nothing fits even a quota over its usage', () => {
    expect(quotaRefusal([{ ...repo(50, 70, 30), addedBytes: 0 }], 1000)).toBeUndefined();
    expect(quotaRefusal([{ ...repo(100, 60, 30), addedBytes: 10 }], 1000)).toBeUndefined();
    expect(quotaRefusal([{ ...repo(100, 60, 30), addedBytes: 11 }], 1000)).toMatchObject({
      requestedBytes: 11,
      remainingBytes: 10,
    });
    // Unpinned, an empty reservation still does not fit a quota over its usage.
    expect(quotaRefusal([repo(50, 70, 30)], 0)).toMatchObject({ requestedBytes: 0, remainingBytes: 0 });
  });

  it('the error carries the numbers in its body fields', () => {
    const err = quotaExceeded(quotaRefusal([repo(100, 60, 30)], 25)!);
    expect(err.code).toBe('quota_exceeded');
    expect(err.details).toEqual({
      scope: 'repository',
      subject: 'libs',
      quotaBytes: 100,
      usageBytes: 90,
      remainingBytes: 10,
      requestedBytes: 25,
    });
    expect(err.message).toBe('The repository quota of 100 bytes has 10 bytes left; this upload needs 25.');
  });

  it('a chunked reservation grows to the next whole step', () => {
    expect(nextReservationBytes(1, 1000)).toBe(1000);
    expect(nextReservationBytes(1000, 1000)).toBe(1000);
    expect(nextReservationBytes(1001, 1000)).toBe(2000);
  });
});
