import { describe, expect, it } from 'vitest';
import { planPartCopies, S3_MAX_PARTS } from './s3-transfer.ts';

const MiB = 1024 * 1024;

describe('planPartCopies (server-side assembly of multipart sessions)', () => {
  it('one UploadPartCopy per part when every part but the last has at least 5 MiB', () => {
    expect(planPartCopies([5 * MiB, 8 * MiB, 3], 5 * 1024 * MiB)).toEqual([
      { source: 0, start: 0, end: 5 * MiB - 1 },
      { source: 1, start: 0, end: 8 * MiB - 1 },
      { source: 2, start: 0, end: 2 },
    ]);
  });

  it('declines a part below 5 MiB that is not the last (S3 would refuse the completion)', () => {
    expect(planPartCopies([4 * MiB, 8 * MiB], 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies([8 * MiB, 4 * MiB], 5 * 1024 * MiB)).toHaveLength(2);
  });

  it('splits a part above the copy limit into equal ranges, and declines when they would be too small', () => {
    expect(planPartCopies([11 * MiB, MiB], 6 * MiB)).toEqual([
      { source: 0, start: 0, end: 5.5 * MiB - 1 },
      { source: 0, start: 5.5 * MiB, end: 11 * MiB - 1 },
      { source: 1, start: 0, end: MiB - 1 },
    ]);
    // 12 MiB in ranges of at most 5 MiB: three of 4 MiB, below the minimum.
    expect(planPartCopies([12 * MiB, MiB], 5 * MiB)).toBeUndefined();
  });

  it('skips empty parts; declines an empty whole and more than 10 000 ranges', () => {
    expect(planPartCopies([6 * MiB, 0, 1], 5 * 1024 * MiB)).toEqual([
      { source: 0, start: 0, end: 6 * MiB - 1 },
      { source: 2, start: 0, end: 0 },
    ]);
    expect(planPartCopies([0, 0], 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies(new Array(S3_MAX_PARTS + 1).fill(5 * MiB), 5 * 1024 * MiB)).toBeUndefined();
    expect(planPartCopies(new Array(S3_MAX_PARTS).fill(5 * MiB), 5 * 1024 * MiB)).toHaveLength(S3_MAX_PARTS);
  });
});
