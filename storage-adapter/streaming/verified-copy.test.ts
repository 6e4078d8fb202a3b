import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { verifiedCopy } from './verified-copy.ts';

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function* from(...chunks: Buffer[]): AsyncGenerator<Buffer> {
  yield* chunks;
}

/** Every chunk the copy passed on, and how it ended. */
async function copy(source: AsyncIterable<Buffer>, blob: Buffer) {
  const passed: Buffer[] = [];
  try {
    for await (const chunk of verifiedCopy(source, { sha256: sha256(blob), sizeBytes: blob.length }, 'GET /t'))
      passed.push(chunk);
    return { passed: Buffer.concat(passed), error: undefined };
  } catch (error) {
    return { passed: Buffer.concat(passed), error };
  }
}

describe('verifiedCopy', () => {
  const blob = randomBytes(10_000);

  it("passes the blob's bytes through unchanged and ends", async () => {
    expect(await copy(from(blob.subarray(0, 4000), blob.subarray(4000)), blob)).toEqual({
      passed: blob,
      error: undefined,
    });
  });

  it('fails stored_bytes_mismatch, before the body ends, for bytes cut short, longer, or of the same size but other', async () => {
    const other = Buffer.from(blob);
    other[5000] = other[5000]! ^ 1;
    for (const source of [blob.subarray(0, 9999), Buffer.concat([blob, Buffer.from('x')]), other, Buffer.alloc(0)]) {
      const { error } = await copy(from(source), blob);
      expect(error).toMatchObject({
        code: 'stored_bytes_mismatch',
        message: expect.stringContaining(`not the 10000 bytes of sha256 ${sha256(blob)}`),
      });
    }
  });

  it('a source that fails fails the copy as it failed', async () => {
    const failure = Object.assign(new Error('cut'), { code: 'upstream_unreachable' });
    async function* failing(): AsyncGenerator<Buffer> {
      yield blob.subarray(0, 100);
      throw failure;
    }
    expect((await copy(failing(), blob)).error).toBe(failure);
  });
});
