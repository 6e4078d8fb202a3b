import { describe, expect, it } from 'vitest';
import type { StorageError } from '../errors.ts';
import { MAX_PARTS, parseListedParts, planCompletion, type ReceivedPart } from './completion-plan.ts';

const h = (c: string) => c.repeat(64);
const received: ReceivedPart[] = [
  { partNumber: 1, sizeBytes: 10, sha256: h('a') },
  { partNumber: 2, sizeBytes: 20, sha256: h('b') },
  { partNumber: 3, sizeBytes: 5, sha256: h('c') },
];

function refusal(fn: () => unknown): { code: string; message: string } | undefined {
  try {
    fn();
  } catch (err) {
    return { code: (err as StorageError).code, message: (err as StorageError).message };
  }
  return undefined;
}
const codeOf = (fn: () => unknown) => refusal(fn)?.code;

describe('planCompletion', () => {
  it('orders the listed parts and adds up their size', () => {
    expect(
      planCompletion(
        [
          { partNumber: 1, sha256: h('a') },
          { partNumber: 3, sha256: h('c') },
        ],
        received,
        15,
      ),
    ).toEqual({ parts: [received[0], received[2]], totalBytes: 15 });
  });

  it.each([
    [
      [
        { partNumber: 2, sha256: h('b') },
        { partNumber: 1, sha256: h('a') },
      ],
      null,
      'parts_out_of_order',
    ],
    [
      [
        { partNumber: 1, sha256: h('a') },
        { partNumber: 1, sha256: h('a') },
      ],
      null,
      'parts_out_of_order',
    ],
    [
      [
        { partNumber: 1, sha256: h('a') },
        { partNumber: 4, sha256: h('d') },
      ],
      null,
      'part_missing',
    ],
    [[{ partNumber: 1, sha256: h('b') }], null, 'part_mismatch'],
    [
      [
        { partNumber: 1, sha256: h('a') },
        { partNumber: 2, sha256: h('b') },
      ],
      31,
      'invalid_request',
    ],
  ])('refuses %j (expected size %s) with %s', (listed, expected, code) => {
    expect(codeOf(() => planCompletion(listed, received, expected))).toBe(code);
  });

  it('says in each refusal which part or size is wrong', () => {
    const a = { partNumber: 1, sha256: h('a') };
    expect(refusal(() => planCompletion([{ partNumber: 2, sha256: h('b') }, a], received, null))?.message).toBe(
      'part 1 is listed after part 2; list each part once, ascending',
    );
    expect(refusal(() => planCompletion([{ partNumber: 4, sha256: h('d') }], received, null))?.message).toBe(
      'part 4 was never received',
    );
    expect(refusal(() => planCompletion([{ partNumber: 1, sha256: h('b') }], received, null))?.message).toBe(
      `part 1 was received with sha256 ${h('a')}, not ${h('b')}`,
    );
    expect(refusal(() => planCompletion([a], received, 11))?.message).toBe(
      'the listed parts add up to 10 bytes; the session expects 11',
    );
    // Without an expected size any total goes.
    expect(planCompletion([a], received, null).totalBytes).toBe(10);
  });

  it('parses the parts field strictly', () => {
    expect(parseListedParts([{ partNumber: 1, sha256: h('a') }])).toEqual([{ partNumber: 1, sha256: h('a') }]);
    for (const bad of [
      undefined,
      [],
      'x',
      [{ partNumber: 1.5, sha256: h('a') }],
      [{ partNumber: 1, sha256: 'A'.repeat(64) }],
      [null],
      [1],
      [{ partNumber: 1 }],
      [{ partNumber: 1, sha256: 42 }],
      [{ partNumber: 1, sha256: `x${h('a')}` }],
      [{ partNumber: 1, sha256: `${h('a')}x` }],
      [{ partNumber: 1, sha256: h('a').slice(1) }],
      // Outside the numbers a part can be sent under (it was told parts_out_of_order or part_missing).
      [{ partNumber: 0, sha256: h('a') }],
      [{ partNumber: -1, sha256: h('a') }],
      [{ partNumber: MAX_PARTS + 1, sha256: h('a') }],
      [{ partNumber: 1e300, sha256: h('a') }],
    ]) {
      expect(
        codeOf(() => parseListedParts(bad)),
        JSON.stringify(bad),
      ).toBe('invalid_request');
    }
    expect(refusal(() => parseListedParts([]))?.message).toBe(
      `parts must be a list of 1 to ${MAX_PARTS} { partNumber, sha256 } objects`,
    );
    expect(refusal(() => parseListedParts([{ partNumber: 1, sha256: h('a') }, null]))?.message).toBe(
      `parts[1] must be { partNumber: integer 1 to ${MAX_PARTS}, sha256: 64 lowercase hex }`,
    );
    expect(refusal(() => parseListedParts([{ partNumber: 0, sha256: h('a') }]))?.message).toBe(
      `parts[0] must be { partNumber: integer 1 to ${MAX_PARTS}, sha256: 64 lowercase hex }`,
    );
  });

  it('takes up to MAX_PARTS parts and no more', () => {
    const list = (n: number) => Array.from({ length: n }, (_, i) => ({ partNumber: i + 1, sha256: h('a') }));
    expect(parseListedParts(list(MAX_PARTS))).toHaveLength(MAX_PARTS);
    expect(codeOf(() => parseListedParts(list(MAX_PARTS + 1)))).toBe('invalid_request');
  });
});
