import { describe, expect, it } from 'vitest';
import { StorageError } from '../../storage-adapter/errors.ts';
import { classifyAssemblyFailure, retriesAfter } from './assembly-failure.ts';

describe('classifyAssemblyFailure', () => {
  it('a full disk, a store timing out, unreachable or answering 5xx, or failing its probe passes', () => {
    for (const code of ['storage_full', 'upstream_timeout', 'upstream_unreachable', 'store_unreachable'] as const)
      expect(classifyAssemblyFailure(new StorageError(code))).toBe('store');
  });
  it("a part changed or gone, other bytes under the name, an object the store refuses is the upload's", () => {
    for (const code of ['part_mismatch', 'part_missing', 'conflict', 'object_too_large', 'not_found'] as const)
      expect(classifyAssemblyFailure(new StorageError(code))).toBe('upload');
  });
  it('a raw error or unavailable is ours', () => {
    expect(classifyAssemblyFailure(Object.assign(new Error('ENOTDIR'), { code: 'ENOTDIR' }))).toBe('ours');
    expect(classifyAssemblyFailure(new StorageError('unavailable'))).toBe('ours');
  });
});

describe('retriesAfter', () => {
  it("the upload's failure is final at once", () => {
    expect(retriesAfter('upload', 1, 5, false)).toBe(false);
  });
  it('a failure of ours gets the attempts, expired session or not', () => {
    expect(retriesAfter('ours', 4, 5, true)).toBe(true);
    expect(retriesAfter('ours', 5, 5, false)).toBe(false);
  });
  it('a store failure gets the attempts, then more until its session expires', () => {
    expect(retriesAfter('store', 4, 5, true)).toBe(true);
    expect(retriesAfter('store', 5, 5, false)).toBe(true);
    expect(retriesAfter('store', 40, 5, false)).toBe(true);
    expect(retriesAfter('store', 5, 5, true)).toBe(false);
  });
});
