import { describe, expect, it } from 'vitest';
import { Fill, fillCursor, readFillInto } from './fill.ts';

/** Bytes `from`..`to` of a fill as one reader copies them out, each piece as it was returned. */
function reader(fill: Fill, from: number, to: number) {
  const cursor = fillCursor(fill);
  let position = from;
  return {
    async next(): Promise<string | undefined> {
      if (position > to) return undefined;
      const buffer = Buffer.alloc(to - position + 1);
      const n = await readFillInto(fill, cursor, position, to, buffer, 0, buffer.length);
      position += n;
      return buffer.subarray(0, n).toString();
    },
    async all(): Promise<string[]> {
      const pieces: string[] = [];
      for (let piece = await this.next(); piece !== undefined; piece = await this.next()) pieces.push(piece);
      return pieces;
    },
  };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('a fill shared by readers', () => {
  it('streams bytes as they arrive but holds the last byte of a span until the slice is verified', async () => {
    const fill = new Fill(6);
    const seen: string[] = [];
    const reading = (async () => {
      const r = reader(fill, 0, 5);
      for (let piece = await r.next(); piece !== undefined; piece = await r.next()) seen.push(piece);
    })();
    fill.push(Buffer.from('abc'));
    await tick();
    expect(seen).toEqual(['abc']);
    fill.push(Buffer.from('def'));
    await tick();
    expect(seen).toEqual(['abc', 'de']);
    fill.verify();
    await reading;
    expect(seen).toEqual(['abc', 'de', 'f']);
  });

  it('a reader that joins late gets the bytes from the start; a span inside the slice gets exactly its bytes', async () => {
    const fill = new Fill(6);
    fill.push(Buffer.from('ab'));
    fill.push(Buffer.from('cdef'));
    fill.verify();
    expect((await reader(fill, 0, 5).all()).join('')).toBe('abcdef');
    expect((await reader(fill, 1, 3).all()).join('')).toBe('bcd');
  });

  it('a span ending inside the slice gets its last byte only once the slice is verified', async () => {
    const fill = new Fill(6);
    fill.push(Buffer.from('abcdef'));
    const r = reader(fill, 1, 3);
    expect(await r.next()).toBe('bc');
    const last = r.next();
    await tick();
    fill.verify();
    expect(await last).toBe('d');
  });

  it('bytes written in place with grew() are read like pushed ones', async () => {
    const fill = new Fill(4);
    Buffer.from('wxyz').copy(fill.free);
    fill.grew(4);
    fill.verify();
    expect((await reader(fill, 0, 3).all()).join('')).toBe('wxyz');
  });

  it('a retry after a digest failure cuts readers that had bytes and continues those that had none', async () => {
    const fill = new Fill(4);
    fill.push(Buffer.from('xx'));
    const early = reader(fill, 0, 3);
    expect(await early.next()).toBe('xx');
    const late = reader(fill, 2, 3).all();
    fill.restart();
    fill.push(Buffer.from('good'));
    fill.verify();
    await expect(early.next()).rejects.toMatchObject({ code: 'slice_digest_mismatch' });
    expect((await late).join('')).toBe('od');
  });

  it('a failed fill fails its readers; the last byte was never handed out', async () => {
    const fill = new Fill(4);
    const got: string[] = [];
    const reading = (async () => {
      const r = reader(fill, 0, 3);
      for (let piece = await r.next(); piece !== undefined; piece = await r.next()) got.push(piece);
    })();
    fill.push(Buffer.from('wron'));
    await tick();
    fill.fail(Object.assign(new Error('mismatch'), { code: 'slice_digest_mismatch' }));
    await expect(reading).rejects.toThrow('mismatch');
    expect(got.join('')).toBe('wro');
  });

  it('hands its buffer back once the filler and every reader let go, not before', () => {
    const freed: Buffer[] = [];
    const bytes = Buffer.alloc(8);
    const fill = new Fill(8, bytes, (b) => freed.push(b));
    fill.hold();
    fill.unhold();
    expect(freed).toEqual([]);
    fill.hold();
    fill.unhold();
    fill.unhold();
    expect(freed).toHaveLength(1);
    expect(freed[0]).toBe(bytes);
  });
});
