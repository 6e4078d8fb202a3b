import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isConsistent, SliceHasher, sliceCount, slicesCovering } from '../slice-digests.ts';
import { OffThreadSha256 } from './off-thread-sha256.ts';
import { checkedUpload } from './checked-upload.ts';

const expected = (bytes: Buffer, slice: number) =>
  Buffer.concat(
    Array.from({ length: sliceCount(bytes.length, slice) }, (_, i) =>
      createHash('sha256')
        .update(bytes.subarray(i * slice, (i + 1) * slice))
        .digest(),
    ),
  );

function* pieces(bytes: Buffer, size: number) {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

async function* asyncPieces(bytes: Buffer, size: number) {
  yield* pieces(bytes, size);
}

describe('slice digests', () => {
  it.each([
    [0, 64 * 1024, 1000],
    [1, 64 * 1024, 1000],
    [64 * 1024, 64 * 1024, 7],
    [3 * 1024 * 1024 + 5, 1024 * 1024, 300_000],
  ])(
    'of %i bytes in %i-byte slices are the same in any chunking, in-thread and off-thread',
    async (size, slice, chunk) => {
      const bytes = randomBytes(size);
      const hasher = new SliceHasher(slice);
      for (const p of pieces(bytes, chunk)) hasher.update(p);
      expect(hasher.finish().digests.equals(expected(bytes, slice))).toBe(true);
      const off = new OffThreadSha256({ sliceBytes: slice });
      for (const p of pieces(bytes, chunk)) await off.update(Buffer.from(p));
      expect(await off.digest()).toBe(createHash('sha256').update(bytes).digest('hex'));
      expect((off.sliceDigests ?? Buffer.alloc(0)).equals(expected(bytes, slice))).toBe(true);
    },
  );

  it('are computed by the checked upload of every store, small or large body', async () => {
    for (const [size, declared] of [
      [100_000, true],
      [5 * 1024 * 1024 + 1, true],
      [5 * 1024 * 1024 + 1, false],
    ] as const) {
      const bytes = randomBytes(size);
      const upload = checkedUpload(asyncPieces(bytes, 65_536), {
        maxBytes: Number.MAX_SAFE_INTEGER,
        expectedLength: declared ? size : undefined,
        sliceBytes: 1024 * 1024,
      });
      for await (const _ of upload.chunks);
      expect(upload.result.sliceDigests?.digests.equals(expected(bytes, 1024 * 1024))).toBe(true);
    }
  });

  it('a record is trusted only when well formed for its blob: whole sizes, a slice size above 0, one digest per slice', () => {
    const record = (sizeBytes: number, sliceBytes: number, digestCount: number) => ({
      sizeBytes,
      sliceBytes,
      digests: Buffer.alloc(digestCount * 32),
    });
    expect(isConsistent(record(0, 1024, 0))).toBe(true);
    expect(isConsistent(record(1024, 1024, 1))).toBe(true);
    expect(isConsistent(record(1025, 1024, 2))).toBe(true);
    expect(isConsistent(record(1025, 1024, 1))).toBe(false);
    expect(isConsistent(record(1024, 1024, 2))).toBe(false);
    expect(isConsistent({ ...record(1024, 1024, 1), digests: Buffer.alloc(31) })).toBe(false);
    expect(isConsistent(record(1024, 0, 0))).toBe(false);
    // Each of these passes the digest count (a count of -0 or of a fraction rounded up) and is refused by its own check.
    expect(isConsistent(record(-1, 1024, 0))).toBe(false);
    expect(isConsistent(record(1024.5, 1024, 2))).toBe(false);
    expect(isConsistent(record(0, -1024, 0))).toBe(false);
    expect(isConsistent(record(1024, 1.5, 683))).toBe(false);
  });

  it('a range covers the slices of its first and last byte', () => {
    expect(slicesCovering({ start: 0, end: 0 }, 10)).toEqual({ first: 0, last: 0 });
    expect(slicesCovering({ start: 9, end: 10 }, 10)).toEqual({ first: 0, last: 1 });
    expect(slicesCovering({ start: 35, end: 1034 }, 1000)).toEqual({ first: 0, last: 1 });
  });
});
