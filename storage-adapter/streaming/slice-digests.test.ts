import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { SliceHasher, sliceCount, slicesCovering } from '../slice-digests.ts';
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

  it('a range covers the slices of its first and last byte', () => {
    expect(slicesCovering({ start: 0, end: 0 }, 10)).toEqual({ first: 0, last: 0 });
    expect(slicesCovering({ start: 9, end: 10 }, 10)).toEqual({ first: 0, last: 1 });
    expect(slicesCovering({ start: 35, end: 1034 }, 1000)).toEqual({ first: 0, last: 1 });
  });
});
