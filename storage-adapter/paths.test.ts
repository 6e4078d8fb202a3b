import { describe, expect, it } from 'vitest';
import { blobRelativePath, isPathInsideDirectory, resolveInsideRoot } from './paths.ts';

const root = '/srv/arkvory';
const hex = 'ab'.repeat(32);

describe('resolveInsideRoot', () => {
  it('joins a relative path under the root', () => {
    expect(resolveInsideRoot(root, 'tmp/x.upload')).toBe('/srv/arkvory/tmp/x.upload');
    expect(resolveInsideRoot(root, blobRelativePath(hex))).toBe(`/srv/arkvory/blobs/sha256/ab/ab/${hex}`);
  });

  it.each([['../outside'], ['tmp/../../etc/passwd'], ['/etc/passwd'], ['tmp/\0x'], [''], ['.'], ['tmp/..']])(
    'refuses %j',
    (relative) => {
      expect(() => resolveInsideRoot(root, relative)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
    },
  );

  it('refuses a relative root', () => {
    expect(() => resolveInsideRoot('data', 'tmp')).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('does not treat a sibling with the same prefix as inside', () => {
    expect(isPathInsideDirectory('/srv/arkvory', '/srv/arkvory-evil/x')).toBe(false);
    expect(isPathInsideDirectory('/srv/arkvory', '/srv/arkvory/x')).toBe(true);
  });
});

describe('blobRelativePath', () => {
  it.each([['AB'.repeat(32)], ['ab'.repeat(31)], [`../${'a'.repeat(61)}`], ['g'.repeat(64)]])('refuses %j', (id) => {
    expect(() => blobRelativePath(id)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });
});
