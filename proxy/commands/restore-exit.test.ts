/**
 * A committed restore's exit code from its scrub: blobs the scrub left unjudged are no clean restore
 * (4, as scrub's own), damage outweighs them, and both outweigh a missing audit entry.
 */
import { describe, expect, it } from 'vitest';
import { scrubReport } from '../../test/support/scrub-report.ts';
import { restoreExitCode } from './backup-commands.ts';
import { EXIT_AUDIT_NOT_RECORDED } from './cli-audit.ts';

describe('restore exit code', () => {
  it('is 4 when the scrub left blobs unjudged, even with the audit entry missing; 1 for damage; else what the audit gave', () => {
    expect(restoreExitCode(scrubReport(0, 0, 0), 0)).toBe(0);
    expect(restoreExitCode(scrubReport(0, 0, 0), EXIT_AUDIT_NOT_RECORDED)).toBe(EXIT_AUDIT_NOT_RECORDED);
    expect(restoreExitCode(scrubReport(0, 0, 1), 0)).toBe(4);
    expect(restoreExitCode(scrubReport(0, 0, 1), EXIT_AUDIT_NOT_RECORDED)).toBe(4);
    expect(restoreExitCode(scrubReport(1, 0, 1), EXIT_AUDIT_NOT_RECORDED)).toBe(1);
    expect(restoreExitCode(scrubReport(0, 1, 0), 0)).toBe(1);
  });
});
