import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS, retryDelayMs } from './retry-delay.ts';

describe('the wait before a job is claimed again', () => {
  it('is none before its first attempt, then doubles: 2, 4, 8 and 16 s between five attempts', () => {
    expect(DEFAULT_RETRY_DELAY_MS).toBe(2000);
    expect([0, 1, 2, 3, 4].map((attempts) => retryDelayMs(attempts))).toEqual([0, 2000, 4000, 8000, 16_000]);
  });

  it('is none with a base of 0, and never past its bound', () => {
    expect(retryDelayMs(3, 0)).toBe(0);
    expect(retryDelayMs(40, 1000)).toBe(MAX_RETRY_DELAY_MS);
  });
});
