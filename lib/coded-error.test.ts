import { describe, expect, it } from 'vitest';
import { CodedError, defineErrors, mergeCatalogues } from './coded-error.ts';

const A = defineErrors('layer-a', {
  shared_code: { status: 400, message: 'A meaning.', advice: 'Do A.' },
  only_a: { status: null, message: 'Only A.', advice: 'Do only A.' },
});
const B = defineErrors('layer-b', {
  shared_code: { status: 409, message: 'Another meaning.', advice: 'Do B.' },
});
const C = defineErrors('layer-c', {
  only_c: { status: 503, message: 'Only C.', advice: 'Do C.' },
});

describe('mergeCatalogues', () => {
  it('refuses a code two layers declare, naming the code and both layers', () => {
    expect(() => mergeCatalogues('merged', A, C, B)).toThrowError(
      expect.objectContaining({
        code: 'duplicate_error_code',
        message: expect.stringMatching(/"shared_code" is declared by both layer-a and layer-b/),
      }),
    );
  });

  it('keeps every entry of distinct catalogues and remembers which layer declared each code', () => {
    const merged = mergeCatalogues('merged', A, C);
    expect(merged.entries).toEqual({ ...A.entries, ...C.entries });
    expect(merged.layerOf).toEqual({ shared_code: 'layer-a', only_a: 'layer-a', only_c: 'layer-c' });
    expect(Object.isFrozen(merged.entries)).toBe(true);
  });
});

describe('CodedError', () => {
  const merged = mergeCatalogues('merged', A, C);

  it('says what its code means when raised without a message, and keeps the cause', () => {
    const cause = new Error('ECONNRESET');
    const err = new CodedError(merged, 'only_c', undefined, { cause });
    expect(err).toMatchObject({ code: 'only_c', message: 'Only C.', cause, headers: {}, details: {} });
    expect(err).toBeInstanceOf(Error);
  });

  it('carries the raise site’s message, headers and body details', () => {
    const err = new CodedError(merged, 'shared_code', 'Field x is wrong.', {
      headers: { 'retry-after': '2' },
      details: { problems: ['x'] },
    });
    expect(err).toMatchObject({
      code: 'shared_code',
      message: 'Field x is wrong.',
      headers: { 'retry-after': '2' },
      details: { problems: ['x'] },
    });
    expect('cause' in err).toBe(false);
  });
});
