/** Scrub's exit code from its report: damage outweighs blobs left unjudged, which are not a clean run. */
import { describe, expect, it } from 'vitest';
import { EXIT_SCRUB_AGAIN, scrubExitCode } from './maintenance-commands.ts';

const report = (corrupt: number, missing: number, unjudged: number) => ({
  checked: 3,
  bytes: 30,
  corrupt: Array.from({ length: corrupt }, (_, i) => ({ blob: `c${i}`, actualSha256: 'x', quarantinedAs: 'q' })),
  missing: Array.from({ length: missing }, (_, i) => `m${i}`),
  unjudged: Array.from({ length: unjudged }, (_, i) => ({
    blob: `u${i}`,
    code: 'read_incomplete' as const,
    message: 'cut short',
  })),
});

describe('scrub exit code', () => {
  it('is 0 when clean, 4 when blobs were left unjudged, 1 when any was corrupt or missing (with or without unjudged ones)', () => {
    expect(scrubExitCode(report(0, 0, 0))).toBe(0);
    expect(EXIT_SCRUB_AGAIN).toBe(4);
    expect(scrubExitCode(report(0, 0, 2))).toBe(4);
    expect(scrubExitCode(report(1, 0, 2))).toBe(1);
    expect(scrubExitCode(report(0, 1, 0))).toBe(1);
  });
});
