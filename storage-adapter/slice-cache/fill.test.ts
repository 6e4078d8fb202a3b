import { describe, expect, it } from 'vitest';
import { Fill, readFill } from './fill.ts';

async function collect(it: AsyncIterable<Buffer>): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const b of it) out.push(b);
  return Buffer.concat(out);
}

describe('a fill shared by readers', () => {
  it('streams bytes as they arrive but holds the piece that ends a span until the slice is verified', async () => {
    const fill = new Fill(6);
    const seen: string[] = [];
    const reading = (async () => {
      for await (const b of readFill(fill, 0, 5)) seen.push(b.toString());
    })();
    fill.push(Buffer.from('abc'));
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(['abc']);
    fill.push(Buffer.from('def'));
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(['abc']);
    fill.verify();
    await reading;
    expect(seen).toEqual(['abc', 'def']);
  });

  it('a reader that joins late gets the bytes from the start; a span inside the slice gets exactly its bytes', async () => {
    const fill = new Fill(6);
    fill.push(Buffer.from('ab'));
    fill.push(Buffer.from('cdef'));
    fill.verify();
    expect((await collect(readFill(fill, 0, 5))).toString()).toBe('abcdef');
    expect((await collect(readFill(fill, 1, 3))).toString()).toBe('bcd');
  });

  it('a retry after a digest failure cuts readers that had bytes and continues those that had none', async () => {
    const fill = new Fill(4);
    fill.push(Buffer.from('xx'));
    const early = readFill(fill, 0, 3);
    expect((await early.next()).value?.toString()).toBe('xx');
    const late = collect(readFill(fill, 2, 3));
    fill.restart();
    fill.push(Buffer.from('good'));
    fill.verify();
    await expect(early.next()).rejects.toMatchObject({ code: 'slice_digest_mismatch' });
    expect((await late).toString()).toBe('od');
  });

  it('a failed fill fails its readers; the last piece was never handed out', async () => {
    const fill = new Fill(4);
    const got: string[] = [];
    const reading = (async () => {
      for await (const b of readFill(fill, 0, 3)) got.push(b.toString());
    })();
    fill.push(Buffer.from('wron'));
    await new Promise((r) => setImmediate(r));
    fill.fail(Object.assign(new Error('mismatch'), { code: 'slice_digest_mismatch' }));
    await expect(reading).rejects.toThrow('mismatch');
    expect(got).toEqual([]);
  });
});
