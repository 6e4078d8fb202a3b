import { describe, expect, it } from 'vitest';
import { aptAssetKey, keyFromParams, normalizeName, pathOfKey } from './paths.ts';

describe('content names', () => {
  it('are stored in NFC: a composed and a decomposed café are one artifact', () => {
    const composed = keyFromParams('artifact', { repo: 'r', id: 'caf\u00e9' });
    const decomposed = keyFromParams('artifact', { repo: 'r', id: 'cafe\u0301' });
    expect(decomposed).toEqual(composed);
    expect(composed.name).toBe('caf\u00e9');
    expect(pathOfKey(decomposed)).toBe('/api/v1/repositories/r/artifacts/caf%C3%A9');
    expect(keyFromParams('asset', { repo: 'r', name: 'Ångström', version: '1.0', asset: 'n\u0303.tgz' })).toMatchObject(
      { name: '\u00c5ngstr\u00f6m', asset: '\u00f1.tgz' },
    );
  });

  it.each([
    ['a C1 control (NEL)', 'a\u0085b', 'U+0085'],
    ['a C0 control', 'a\u0007b', 'U+0007'],
    ['DEL', 'a\u007fb', 'U+007F'],
    ['a right-to-left override', 'evil\u202Egpj.exe', 'U+202E'],
    ['a bidi isolate', 'a\u2067b', 'U+2067'],
    ['a zero-width space', 'a\u200Bb', 'U+200B'],
    ['a byte-order mark', '\uFEFFname', 'U+FEFF'],
    ['full-width dots', '\uFF0E\uFF0E', 'U+FF0E'],
    ['a one-dot leader', 'a\u2024b', 'U+2024'],
  ])('refuses %s with invalid_request naming the character', (_what, value, code) => {
    expect(() => normalizeName(value, 'artifact id')).toThrow(
      expect.objectContaining({ code: 'invalid_request', message: expect.stringContaining(code) }) as Error,
    );
  });

  it('keeps the length bound after normalising, and refuses empty names', () => {
    expect(normalizeName('e\u0301'.repeat(255), 'asset name')).toBe('\u00e9'.repeat(255)); // 510 code units, 255 after NFC
    expect(() => normalizeName('x'.repeat(256), 'asset name')).toThrow(/at most 255/);
    expect(normalizeName('x'.repeat(255), 'asset name')).toBe('x'.repeat(255));
    expect(() => normalizeName('', 'asset name')).toThrow(/must not be empty/);
    expect(() => keyFromParams('package', { repo: 'r', name: 'p' })).toThrow(/package version/);
  });

  it('refuses "." and ".." and keeps any other printable ASCII name as it is', () => {
    expect(() => normalizeName('.', 'artifact id')).toThrow(/must not be "." or ".."/);
    expect(() => normalizeName('..', 'artifact id')).toThrow(/must not be "." or ".."/);
    expect(normalizeName(' a~b..c! ', 'artifact id')).toBe(' a~b..c! ');
  });

  it('map an apt path to the asset of that name, under the same rules', () => {
    const key = aptAssetKey({ repo: 'r', name: 'apt', version: 'stable', file: 'hello_1.0+b1_all.deb' });
    expect(key).toEqual(
      keyFromParams('asset', { repo: 'r', name: 'apt', version: 'stable', asset: 'hello_1.0+b1_all.deb' }),
    );
    expect(pathOfKey(key)).toBe('/api/v1/repositories/r/packages/apt/stable/assets/hello_1.0%2Bb1_all.deb');
    expect(() => aptAssetKey({ repo: 'r', name: 'apt', version: 'stable', file: 'a\u202Eb' })).toThrow(/U\+202E/);
  });
});
