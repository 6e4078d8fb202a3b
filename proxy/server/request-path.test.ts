import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { simplePathname } from './request-path.ts';

const BASE = 'http://gateway.invalid';

describe('simplePathname', () => {
  it('takes the common artifact paths as they are', () => {
    expect(simplePathname('/api/v1/repositories/bench/artifacts/s4k.bin/content')).toBe(
      '/api/v1/repositories/bench/artifacts/s4k.bin/content',
    );
    expect(simplePathname('/a/b.c/d?x=1&y=%2F')).toBe('/a/b.c/d');
    expect(simplePathname('/')).toBe('/');
  });

  it('leaves to the URL parser whatever it might change', () => {
    for (const t of [
      '//host/x',
      '/a/./b',
      '/a/../b',
      '/..',
      '/.',
      '/a/%2e/b',
      '/a\\b',
      '/a b',
      'http://h/x',
      '/é',
      '/a#b',
      '*',
    ])
      expect(simplePathname(t)).toBeUndefined();
  });

  it('never disagrees with new URL(target).pathname', () => {
    const alphabet = [...'abZ09._~!$&\'()*+,;=:@/-%?#\\ \t"<>^`{}|[]é'];
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(...alphabet), { maxLength: 24 }).map((cs) => `/${cs.join('')}`),
        (target) => {
          const fast = simplePathname(target);
          if (fast !== undefined) expect(fast).toBe(new URL(target, BASE).pathname);
        },
      ),
      { numRuns: 20_000 },
    );
  });
});
