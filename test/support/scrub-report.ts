/** A scrub report with `corrupt`, `missing` and `unjudged` blobs, for the exit-code tests of scrub and restore. */
export function scrubReport(corrupt: number, missing: number, unjudged: number) {
  return {
    checked: 3,
    bytes: 30,
    corrupt: Array.from({ length: corrupt }, (_, i) => ({ blob: `c${i}`, actualSha256: 'x', quarantinedAs: 'q' })),
    missing: Array.from({ length: missing }, (_, i) => `m${i}`),
    unjudged: Array.from({ length: unjudged }, (_, i) => ({
      blob: `u${i}`,
      code: 'read_incomplete' as const,
      message: 'cut short',
    })),
  };
}
