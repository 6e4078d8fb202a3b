import { describe, expect, it } from 'vitest';
import { isMediaType, MAX_MEDIA_TYPE_LENGTH } from './media-type.ts';

describe('an upload’s media type', () => {
  it('takes type/subtype with parameters, plain or quoted', () => {
    for (const t of ['application/octet-stream', 'text/plain; charset=utf-8', 'text/plain;a=b ; c="d e"'])
      expect(isMediaType(t)).toBe(true);
  });

  it('refuses what is no media type', () => {
    for (const t of [
      '',
      'text',
      'text/',
      '/plain',
      'text/plain; charset',
      'text/plain\r\nx: y',
      'text/plain; a="b\nc"',
    ])
      expect(isMediaType(t)).toBe(false);
  });

  it(`takes at most ${MAX_MEDIA_TYPE_LENGTH} characters`, () => {
    const longest = `application/${'x'.repeat(MAX_MEDIA_TYPE_LENGTH - 'application/'.length)}`;
    expect(isMediaType(longest)).toBe(true);
    expect(isMediaType(`${longest}x`)).toBe(false);
  });
});
