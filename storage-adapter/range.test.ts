import { describe, expect, it } from 'vitest';
import { COALESCE_GAP_BYTES, contentRangeHeader, decideRange, MAX_RANGES, unsatisfiedRangeHeader } from './range.ts';

describe('decideRange', () => {
  it.each([
    ['absent', undefined, 1000, { kind: 'full' }],
    ['first bytes', 'bytes=0-99', 1000, { kind: 'partial', ranges: [{ start: 0, end: 99 }] }],
    ['open-ended', 'bytes=900-', 1000, { kind: 'partial', ranges: [{ start: 900, end: 999 }] }],
    ['suffix', 'bytes=-100', 1000, { kind: 'partial', ranges: [{ start: 900, end: 999 }] }],
    ['suffix longer than the file', 'bytes=-5000', 1000, { kind: 'partial', ranges: [{ start: 0, end: 999 }] }],
    [
      'last-pos past the end is clamped',
      'bytes=990-5000',
      1000,
      { kind: 'partial', ranges: [{ start: 990, end: 999 }] },
    ],
    ['single last byte', 'bytes=999-999', 1000, { kind: 'partial', ranges: [{ start: 999, end: 999 }] }],
    [
      'unit is case-insensitive, OWS allowed around the commas (RFC 9110 §5.6.1.2)',
      'Bytes=0-1 , \t500-501',
      1000,
      {
        kind: 'partial',
        ranges: [
          { start: 0, end: 1 },
          { start: 500, end: 501 },
        ],
      },
    ],
    [
      'several far apart keep the client order',
      'bytes=500-599,0-99',
      1000,
      {
        kind: 'partial',
        ranges: [
          { start: 500, end: 599 },
          { start: 0, end: 99 },
        ],
      },
    ],
    [
      'overlapping are coalesced in ascending order',
      'bytes=50-150,0-99',
      1000,
      { kind: 'partial', ranges: [{ start: 0, end: 150 }] },
    ],
    ['adjacent are coalesced', 'bytes=0-9,10-19', 1000, { kind: 'partial', ranges: [{ start: 0, end: 19 }] }],
    [
      'a small gap is coalesced',
      `bytes=0-9,${10 + COALESCE_GAP_BYTES}-200`,
      1000,
      { kind: 'partial', ranges: [{ start: 0, end: 200 }] },
    ],
    [
      'a large gap is not',
      `bytes=0-9,${11 + COALESCE_GAP_BYTES}-200`,
      1000,
      {
        kind: 'partial',
        ranges: [
          { start: 0, end: 9 },
          { start: 11 + COALESCE_GAP_BYTES, end: 200 },
        ],
      },
    ],
    [
      'unsatisfiable specs are dropped',
      'bytes=0-9,5000-6000',
      1000,
      { kind: 'partial', ranges: [{ start: 0, end: 9 }] },
    ],
    ['empty list elements are ignored', 'bytes=0-9,,', 1000, { kind: 'partial', ranges: [{ start: 0, end: 9 }] }],
    // RFC 9110 §14.1.1: `range-unit "=" range-set`, no OWS around the '=' nor before the first element.
    ['a space before the equals sign', 'bytes =0-1', 1000, { kind: 'full' }],
    ['a space after the equals sign', 'bytes= 0-1', 1000, { kind: 'full' }],
    ['spaces around the equals sign', 'bytes = 0-1', 1000, { kind: 'full' }],
    ['a tab after the equals sign', 'bytes=\t0-1', 1000, { kind: 'full' }],
    ['a space before the unit', ' bytes=0-1', 1000, { kind: 'full' }],
    [
      'an empty first element may have OWS before its comma',
      'bytes= ,0-1',
      1000,
      { kind: 'partial', ranges: [{ start: 0, end: 1 }] },
    ],
    ['OWS after the last element', 'bytes=0-1 \t', 1000, { kind: 'partial', ranges: [{ start: 0, end: 1 }] }],
    // Not OWS: a no-break space is no list separator, nor is a vertical tab.
    ['a no-break space after a comma', 'bytes=0-1,\u00a0200-300', 1000, { kind: 'full' }],
    ['a no-break space before a comma', 'bytes=0-1\u00a0,200-300', 1000, { kind: 'full' }],
    ['a vertical tab after a comma', 'bytes=0-1,\v200-300', 1000, { kind: 'full' }],
    ['spaces inside a range-spec', 'bytes=0 - 1', 1000, { kind: 'full' }],
    ['first-pos at size', 'bytes=1000-', 1000, { kind: 'unsatisfiable' }],
    ['zero suffix', 'bytes=-0', 1000, { kind: 'unsatisfiable' }],
    ['any range of an empty file', 'bytes=0-', 0, { kind: 'unsatisfiable' }],
    ['a range from a position of an empty file', 'bytes=0-5', 0, { kind: 'unsatisfiable' }],
    ['a zero suffix of an empty file', 'bytes=-0', 0, { kind: 'unsatisfiable' }],
    // Satisfiable (RFC 9110 §14.1.1), and no 206 can carry zero bytes.
    ['a suffix of an empty file is the whole', 'bytes=-10', 0, { kind: 'full' }],
    ['a suffix among others of an empty file is the whole', 'bytes=0-,-1', 0, { kind: 'full' }],
    ['huge first-pos', 'bytes=99999999999999999999999-', 1000, { kind: 'unsatisfiable' }],
    [
      'huge last-pos is clamped',
      'bytes=5-99999999999999999999999',
      1000,
      { kind: 'partial', ranges: [{ start: 5, end: 999 }] },
    ],
    ['other unit is ignored', 'items=0-5', 1000, { kind: 'full' }],
    ['last < first makes the field invalid', 'bytes=10-5', 1000, { kind: 'full' }],
    ['garbage', 'bytes=abc', 1000, { kind: 'full' }],
    ['negative numbers', 'bytes=--5', 1000, { kind: 'full' }],
    ['no equals sign', 'bytes 0-5', 1000, { kind: 'full' }],
    ['empty set', 'bytes=', 1000, { kind: 'full' }],
    ['a spec without a dash', 'bytes=5', 1000, { kind: 'full' }],
    ['a first-pos that is not a number', 'bytes=x-5', 1000, { kind: 'full' }],
    ['a last-pos that is not a number', 'bytes=5-x', 1000, { kind: 'full' }],
    ['digits followed by junk', 'bytes=5x-10', 1000, { kind: 'full' }],
    [
      'leading zeros do not count towards the digit limit',
      'bytes=0000000000000000005-0000000000000000009',
      1000,
      { kind: 'partial', ranges: [{ start: 5, end: 9 }] },
    ],
    ['leading zeros', 'bytes=007-9', 1000, { kind: 'partial', ranges: [{ start: 7, end: 9 }] }],
    [
      'only the close pairs are coalesced',
      'bytes=500-599,20-29,0-9',
      1000,
      {
        kind: 'partial',
        ranges: [
          { start: 0, end: 29 },
          { start: 500, end: 599 },
        ],
      },
    ],
  ] as const)('%s', (_name, header, size, expected) => {
    expect(decideRange(header, size)).toEqual(expected);
  });

  it(`ignores a header with more than ${MAX_RANGES} ranges and accepts exactly ${MAX_RANGES}`, () => {
    const specs = (n: number) => Array.from({ length: n }, (_, i) => `${i * 1000}-${i * 1000 + 9}`).join(',');
    expect(decideRange(`bytes=${specs(MAX_RANGES + 1)}`, 10_000_000)).toEqual({ kind: 'full' });
    const accepted = decideRange(`bytes=${specs(MAX_RANGES)}`, 10_000_000);
    expect(accepted.kind === 'partial' && accepted.ranges.length).toBe(MAX_RANGES);
  });

  it('takes positions of up to 15 digits exactly; longer ones lie beyond any file', () => {
    const huge = 2 ** 52;
    expect(decideRange('bytes=100000000000000-', huge)).toEqual({
      kind: 'partial',
      ranges: [{ start: 100_000_000_000_000, end: huge - 1 }],
    });
    expect(decideRange('bytes=1000000000000000-', huge)).toEqual({ kind: 'unsatisfiable' });
  });

  it('formats Content-Range', () => {
    expect(contentRangeHeader({ start: 0, end: 99 }, 1000)).toBe('bytes 0-99/1000');
    expect(unsatisfiedRangeHeader(1000)).toBe('bytes */1000');
  });
});
