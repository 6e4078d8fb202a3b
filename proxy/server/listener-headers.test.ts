import { describe, expect, it } from 'vitest';
import { withAnswerHeaders } from './listener-headers.ts';

const HSTS = [['strict-transport-security', 'max-age=60']] as const;

describe('withAnswerHeaders', () => {
  it('adds the listener’s headers to an object, a flat raw list, a list of pairs and no headers at all', () => {
    expect(withAnswerHeaders(undefined, HSTS)).toEqual({ 'strict-transport-security': 'max-age=60' });
    expect(withAnswerHeaders({ 'content-length': 2 }, HSTS)).toEqual({
      'content-length': 2,
      'strict-transport-security': 'max-age=60',
    });
    expect(withAnswerHeaders(['Content-Length', '2', 'Set-Cookie', 'a', 'Set-Cookie', 'b'], HSTS)).toEqual([
      'Content-Length',
      '2',
      'Set-Cookie',
      'a',
      'Set-Cookie',
      'b',
      'strict-transport-security',
      'max-age=60',
    ]);
    const pairs = [['content-length', '2']] as unknown as string[];
    expect(withAnswerHeaders(pairs, HSTS)).toEqual(['content-length', '2', 'strict-transport-security', 'max-age=60']);
  });

  it('replaces a header of the same name in any case, and never changes what it was given', () => {
    const object = { 'Strict-Transport-Security': 'max-age=1', etag: '"x"' };
    expect(withAnswerHeaders(object, HSTS)).toEqual({ etag: '"x"', 'strict-transport-security': 'max-age=60' });
    expect(object).toEqual({ 'Strict-Transport-Security': 'max-age=1', etag: '"x"' });
    const list = ['STRICT-TRANSPORT-SECURITY', 'max-age=1', 'etag', '"x"'];
    expect(withAnswerHeaders(list, HSTS)).toEqual(['etag', '"x"', 'strict-transport-security', 'max-age=60']);
    expect(list).toHaveLength(4);
  });
});
