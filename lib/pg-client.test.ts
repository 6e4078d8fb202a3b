import { describe, expect, it } from 'vitest';
import { allows, parseRequireAuth, requirementOf } from './pg-client.ts';

describe("libpq's require_auth", () => {
  it('absent: any method, or none', () => {
    for (const method of ['password', 'md5', 'scram-sha-256', 'none'] as const) {
      expect(allows(parseRequireAuth(undefined), method)).toBe(true);
    }
  });

  it('a list: only the methods named', () => {
    const only = parseRequireAuth('scram-sha-256');
    expect(allows(only, 'scram-sha-256')).toBe(true);
    expect(allows(only, 'password')).toBe(false);
    expect(allows(only, 'md5')).toBe(false);
    expect(allows(only, 'none')).toBe(false);
    const two = parseRequireAuth('md5, scram-sha-256');
    expect(allows(two, 'md5')).toBe(true);
    expect(allows(two, 'password')).toBe(false);
  });

  it('!methods: every method but those, and no authentication at all', () => {
    const not = parseRequireAuth('!password,!none');
    expect(allows(not, 'password')).toBe(false);
    expect(allows(not, 'none')).toBe(false);
    expect(allows(not, 'md5')).toBe(true);
    expect(allows(not, 'scram-sha-256')).toBe(true);
  });

  it('refuses unknown methods, a mix of both forms and an empty item, with a stable code', () => {
    for (const value of ['scram', 'scram-sha-256,!md5', '!md5,scram-sha-256', '', 'md5,']) {
      expect(() => parseRequireAuth(value), value).toThrow(expect.objectContaining({ code: 'database_auth_refused' }));
    }
  });

  it('is read from a connection URL, and nowhere else', () => {
    expect(requirementOf('postgres://u:p@h/db?require_auth=md5')?.methods).toEqual(new Set(['md5']));
    expect(requirementOf('postgres://u:p@h/db?sslmode=verify-full')).toBeUndefined();
    expect(requirementOf('not a url')).toBeUndefined();
    expect(requirementOf(undefined)).toBeUndefined();
  });
});
