/**
 * What a ranged GET to an HTTP store does when the store misbehaves, against a real nginx answering
 * as a broken store or a proxy that ignores Range would: each is a 502-class `upstream_unreachable`
 * (the store's fault), never a read of the whole object, never a plain error that the content route
 * would report as a damaged catalog.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { RANGE_OBJECT_BYTES, useMisbehavingStore, WHOLE_BYTES } from '../../test/support/misbehaving-store.ts';
import { openRangeStream, rangeStreamReader } from './range-stream.ts';
import type { BlobReader } from '../store.ts';

const SIZE = RANGE_OBJECT_BYTES;
const store = useMisbehavingStore();

const getFrom = (path: string) => (range: string, highWaterMark: number) =>
  request(`${store.base}${path}`, { headers: { range }, highWaterMark });
const what = (path: string) => ({ sha256: 'a'.repeat(64), target: path, timeoutMs: 30_000 });

describe('openRangeStream against a misbehaving store', () => {
  it('a 206 whose range ends before the one asked for is upstream_unreachable', async () => {
    await expect(
      openRangeStream(getFrom('/range/short-range'), what('/range/short-range'), 0, 199),
    ).rejects.toMatchObject({
      code: 'upstream_unreachable',
    });
  });

  it('a 200 (the whole object) to a range further on is upstream_unreachable, and the object is not read', async () => {
    // Even with an onError that reads error bodies (the S3 store's): a 200 never reaches it.
    let errorBodyRead = false;
    const failing = {
      ...what('/range/whole'),
      onError: async () => {
        errorBodyRead = true;
        throw new Error('not an error answer');
      },
    };
    await expect(openRangeStream(getFrom('/range/whole'), failing, 500, 599)).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringMatching(/whole object \(200\)/),
    });
    expect(errorBodyRead).toBe(false);
    // nginx logs the request once the connection is closed; a body read on would run to 1 GiB.
    expect(await store.sentFor('GET /range/whole ')).toBeLessThan(WHOLE_BYTES / 16);
  });

  it('a 200 without a Content-Length (a body filter on the store) is upstream_unreachable, not a blob of NaN bytes', async () => {
    // nginx answers Range with 200 and a chunked body once a filter has rewritten the bytes: the
    // answer says neither the object's size nor that these are its bytes.
    const path = '/nolength-bucket/object';
    await expect(openRangeStream(getFrom(path), what(path), 0, 99)).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('without a valid Content-Length'),
    });
  });

  it('a 206 body longer than its Content-Range is upstream_unreachable at the first byte past it, never read as the bytes after', async () => {
    // read() goes on from the open answer when the next position is where it stopped: bytes the
    // Content-Range does not cover would be taken as the object's bytes 100 and on.
    const reader = rangeStreamReader('a'.repeat(64), SIZE, [{ start: 0, end: 99 }], undefined, (start, end) =>
      openRangeStream(getFrom('/range/long-body'), what('/range/long-body'), start, end),
    );
    const sent = readToEnd(reader, 200);
    await expect(sent.done).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('past byte 99'),
    });
    expect(sent.position).toBe(100);
    await reader.close();
  });

  it('a body that ends before its range is upstream_unreachable from chunks()', async () => {
    const reader = rangeStreamReader('a'.repeat(64), SIZE, [{ start: 0, end: 199 }], undefined, (start, end) =>
      openRangeStream(getFrom('/range/short-body'), what('/range/short-body'), start, end),
    );
    const read = async () => {
      for await (const chunk of reader.chunks!({ start: 0, end: 199 }, new AbortController().signal)) void chunk;
    };
    await expect(read()).rejects.toMatchObject({ code: 'upstream_unreachable' });
    await reader.close();
  });

  it('a body that ends before its range is upstream_unreachable from read() too, not the end of the blob', async () => {
    // read() is what the response writer and the slice cache use with the S3 store's socket reads.
    const reader = rangeStreamReader('a'.repeat(64), SIZE, [{ start: 0, end: 199 }], undefined, (start, end) =>
      openRangeStream(getFrom('/range/short-body'), what('/range/short-body'), start, end),
    );
    const sent = readToEnd(reader, 200);
    await expect(sent.done).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringContaining('at byte 100, before byte 199'),
    });
    expect(sent.position).toBe(100);
    await reader.close();
  });
});

/** Reads `reader` through read() from byte 0 into `size` bytes until it ends; `position` is how far it got. */
function readToEnd(reader: BlobReader, size: number): { done: Promise<void>; readonly position: number } {
  const buffer = Buffer.alloc(size);
  let position = 0;
  const done = (async () => {
    for (;;) {
      const { bytesRead } = await reader.read(buffer, position, size - position, position);
      if (bytesRead === 0) return;
      position += bytesRead;
    }
  })();
  done.catch(() => {});
  return {
    done,
    get position() {
      return position;
    },
  };
}
