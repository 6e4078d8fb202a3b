import { describe, expect, it } from 'vitest';
import type { StorageError } from '../errors.ts';
import { parseListedParts, planCompletion, type ReceivedPart } from './completion-plan.ts';

const h = (c: string) => c.repeat(64);
const received: ReceivedPart[] = [
  { partNumber: 1, sizeBytes: 10, sha256: h('a') },
  { partNumber: 2, sizeBytes: 20, sha256: h('b') },
  { partNumber: 3, sizeBytes: 5, sha256: h('c') },
];

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return (err as StorageError).code;
  }
  return undefined;
}

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

  it('parses the parts field strictly', () => {
    expect(parseListedParts([{ partNumber: 1, sha256: h('a') }])).toEqual([{ partNumber: 1, sha256: h('a') }]);
    for (const bad of [
      undefined,
      [],
      'x',
      [{ partNumber: 1.5, sha256: h('a') }],
      [{ partNumber: 1, sha256: 'A'.repeat(64) }],
      [null],
    ]) {
      expect(codeOf(() => parseListedParts(bad))).toBe('invalid_request');
    }
  });
});
