/** Scrub's exit code from its report: damage outweighs blobs left unjudged, which are not a clean run. */
import { describe, expect, it } from 'vitest';
import { scrubReport } from '../../test/support/scrub-report.ts';
import { EXIT_SCRUB_AGAIN, scrubExitCode } from './maintenance-commands.ts';

describe('scrub exit code', () => {
  it('is 0 when clean, 4 when blobs were left unjudged, 1 when any was corrupt or missing (with or without unjudged ones)', () => {
    expect(scrubExitCode(scrubReport(0, 0, 0))).toBe(0);
    expect(EXIT_SCRUB_AGAIN).toBe(4);
    expect(scrubExitCode(scrubReport(0, 0, 2))).toBe(4);
    expect(scrubExitCode(scrubReport(1, 0, 2))).toBe(1);
    expect(scrubExitCode(scrubReport(0, 1, 0))).toBe(1);
  });
});
