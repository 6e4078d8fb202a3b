import { describe, expect, it } from 'vitest';
import { REPEAT_WINDOW_MS, signalMeaning } from './stop-signals.ts';

describe('signalMeaning', () => {
  it('the first signal stops (drain)', () => {
    expect(signalMeaning(undefined, 5000)).toBe('stop');
  });

  it('the same signal delivered twice at once (terminal group + npm forwarding) is one stop request', () => {
    expect(signalMeaning(5000, 5000)).toBe('repeat');
    expect(signalMeaning(5000, 5000 + REPEAT_WINDOW_MS - 1)).toBe('repeat');
  });

  it('a second signal after the window exits at once', () => {
    expect(signalMeaning(5000, 5000 + REPEAT_WINDOW_MS)).toBe('exit');
    expect(signalMeaning(5000, 60_000)).toBe('exit');
  });
});
