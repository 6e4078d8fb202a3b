import { getEventListeners } from 'node:events';
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

  it('opened settles when the origin answers, when the slice is verified first, and rejects when it fails first', async () => {
    const answered = new Fill(4);
    answered.markOpened();
    await expect(answered.opened).resolves.toBeUndefined();
    const verified = new Fill(4);
    verified.push(Buffer.from('abcd'));
    verified.verify();
    await expect(verified.opened).resolves.toBeUndefined();
    const failed = new Fill(4);
    const error = new Error('origin down');
    failed.fail(error);
    await expect(failed.opened).rejects.toBe(error);
  });

  it('a pushed chunk longer than the rest of the slice is cut at the slice end', () => {
    const bytes = Buffer.from('--------');
    const fill = new Fill(4, bytes);
    expect(fill.push(Buffer.from('ab')).toString()).toBe('ab');
    expect(fill.push(Buffer.from('cdefgh')).toString()).toBe('cd');
    expect(fill.length).toBe(4);
    expect(bytes.toString()).toBe('abcd----');
  });

  it('a restart cuts a waiting reader that had bytes at once, before any byte of the new attempt', async () => {
    const fill = new Fill(4);
    fill.push(Buffer.from('xx'));
    const r = reader(fill, 0, 3);
    expect(await r.next()).toBe('xx');
    const waiting = r.next();
    await tick();
    fill.restart();
    await expect(waiting).rejects.toMatchObject({
      code: 'slice_digest_mismatch',
      message: 'A slice failed its digest check while being sent; the response was cut.',
    });
  });

  it('a slice verified with fewer bytes than a span hands out only those bytes, then fails that reader', async () => {
    const fill = new Fill(6);
    fill.push(Buffer.from('abc'));
    fill.verify();
    const r = reader(fill, 0, 5);
    expect(await r.next()).toBe('abc');
    await expect(r.next()).rejects.toThrow('slice fill verified with 3 bytes, fewer than 6');
  });

  it("a waiting reader's signal ends its wait, and a wait that ends otherwise leaves no listener on it", async () => {
    const fill = new Fill(4);
    const controller = new AbortController();
    const buffer = Buffer.alloc(4);
    const woken = readFillInto(fill, fillCursor(fill), 0, 3, buffer, 0, 4, controller.signal);
    await tick();
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(1);
    fill.push(Buffer.from('ab'));
    expect(await woken).toBe(2);
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
    const aborted = readFillInto(fill, fillCursor(fill), 2, 3, buffer, 0, 4, controller.signal);
    await tick();
    controller.abort(new Error('client went away'));
    await expect(aborted).rejects.toThrow('client went away');
  });

  it('a fill made without a hand-back lets its last hold go quietly', () => {
    const fill = new Fill(4);
    expect(() => fill.unhold()).not.toThrow();
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
