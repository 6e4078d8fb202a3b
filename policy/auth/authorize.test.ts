import { describe, expect, it } from 'vitest';
import { authorize, type Access, type Permission } from './authorize.ts';
import type { Scope } from './principal.ts';

const cases: Array<[Access, Scope[], Permission | undefined, string]> = [
  ['public', [], undefined, 'allow'],
  ['service', ['read'], undefined, 'allow'],
  ['admin', ['read', 'write'], undefined, 'forbidden'],
  ['admin', ['admin'], undefined, 'allow'],
  ['read', ['read'], undefined, 'not_found'],
  ['read', ['admin'], undefined, 'not_found'],
  ['read', ['read'], 'read', 'allow'],
  ['read', ['read'], 'write', 'allow'],
  ['read', ['write'], 'read', 'allow'],
  ['read', ['admin'], 'read', 'forbidden'],
  ['write', ['read', 'write'], undefined, 'not_found'],
  ['write', ['read', 'write'], 'read', 'forbidden'],
  ['write', ['read'], 'write', 'forbidden'],
  ['write', ['write'], 'write', 'allow'],
];

describe('authorize', () => {
  it.each(cases)('%s with scopes %j and grant %s → %s', (access, scopes, grant, expected) => {
    const d = authorize(access, new Set(scopes), grant);
    expect(d.allow ? 'allow' : d.code).toBe(expected);
  });
});
