import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { OffThreadSha256 } from './off-thread-sha256.ts';

/** Feeds `body` in pieces of the given sizes (cycled), waiting whenever the hasher asks to. */
async function hashInPieces(body: Buffer, sizes: number[]): Promise<string> {
  const hasher = new OffThreadSha256();
  for (let offset = 0, i = 0; offset < body.length; i++) {
    const n = Math.min(sizes[i % sizes.length]!, body.length - offset);
    const waiting = hasher.update(body.subarray(offset, offset + n));
    if (waiting) await waiting;
    offset += n;
  }
  return hasher.digest();
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const MiB = 1024 * 1024;

describe('OffThreadSha256', () => {
  it('equals node:crypto for empty, tiny, exact-slot and odd-sized bodies in any piece sizes', async () => {
    for (const size of [0, 1, 4096, MiB, 4 * MiB, 5 * MiB + 12_345]) {
      const body = randomBytes(size);
      for (const pieces of [[1 * MiB], [65_536], [7, 300_001, 2 * MiB + 1]]) {
        expect(await hashInPieces(body, pieces), `${size} bytes in ${pieces.join('/')}`).toBe(sha256(body));
      }
    }
  });

  it('keeps many bodies apart when they are hashed at the same time', async () => {
    const bodies = Array.from({ length: 8 }, (_, i) => randomBytes(3 * MiB + i * 1001));
    const digests = await Promise.all(bodies.map((b, i) => hashInPieces(b, [65_536 + i])));
    expect(digests).toEqual(bodies.map(sha256));
  });

  it('an abandoned body leaves the worker serving the next ones', async () => {
    const dropped = new OffThreadSha256();
    await dropped.update(randomBytes(3 * MiB));
    dropped.abandon();
    const body = randomBytes(2 * MiB);
    expect(await hashInPieces(body, [MiB])).toBe(sha256(body));
  });
});
