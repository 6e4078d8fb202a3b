import { describe, expect, it } from 'vitest';
import { knownMethod, OTHER_METHOD, spanMethod } from './http-method.ts';

describe('knownMethod and spanMethod', () => {
  it('keep the standard methods as they are', () => {
    for (const method of ['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS', 'CONNECT', 'TRACE']) {
      expect(knownMethod(method)).toBe(method);
      expect(spanMethod(method)).toBe(method);
    }
  });

  it('name any other method _OTHER (spans: HTTP), whatever its length or case', () => {
    for (const method of ['M'.repeat(12_000), 'get', 'PROPFIND', '', undefined]) {
      expect(knownMethod(method)).toBe(OTHER_METHOD);
      expect(spanMethod(method)).toBe('HTTP');
    }
  });
});
