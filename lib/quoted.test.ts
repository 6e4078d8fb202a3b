import { describe, expect, it } from 'vitest';
import { MAX_QUOTED_CHARS, quoted } from './quoted.ts';

describe('quoted', () => {
  it('quotes a value up to the bound whole, as JSON', () => {
    expect(quoted('a"b')).toBe('"a\\"b"');
    expect(quoted('x'.repeat(MAX_QUOTED_CHARS))).toBe(`"${'x'.repeat(MAX_QUOTED_CHARS)}"`);
  });

  it('quotes a longer one cut at the bound, saying how long it was', () => {
    expect(quoted('y'.repeat(6000))).toBe(`"${'y'.repeat(MAX_QUOTED_CHARS)}"… (6000 characters)`);
  });

  it('shows a value that is no string as JSON, bounded alike', () => {
    expect(quoted(undefined)).toBe('undefined');
    expect(quoted(42)).toBe('42');
    expect(quoted(['z'.repeat(200)])).toMatch(/^\["z+… \(204 characters\)$/);
  });
});
