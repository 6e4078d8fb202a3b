import { describe, expect, it } from 'vitest';
import { AuditNotRecorded } from './cli-audit.ts';
import { cliFailureLine, cliFailureOf } from './cli-failure.ts';
import { PolicyError } from '../../policy/errors.ts';

/** An error as node:fs or pg raise it: a message and the fields the CLI reads. */
function raised(message: string, fields: Record<string, string>): Error {
  return Object.assign(new Error(message), fields);
}

describe('cliFailureOf', () => {
  it('gives a coded error, a file error, a missing privilege and an unrecorded audit entry their codes and exit codes (3: the change was made)', () => {
    expect(cliFailureOf(new PolicyError('forbidden', 'no'))).toEqual({
      code: 'forbidden',
      message: 'no',
      exitCode: 1,
    });
    expect(
      cliFailureOf(raised("ENOENT: no such file or directory, open '/k'", { code: 'ENOENT', syscall: 'open' })),
    ).toEqual({ code: 'io', message: "ENOENT: no such file or directory, open '/k'", exitCode: 1 });
    const denied = cliFailureOf(raised('permission denied for table arkvory_principals', { code: '42501' }));
    expect(denied?.code).toBe('database_permission');
    expect(denied?.exitCode).toBe(1);
    expect(denied?.message).toContain('permission denied for table arkvory_principals');
    expect(cliFailureOf(new AuditNotRecorded('quota.set was done, but …'))).toEqual({
      code: 'audit_not_recorded',
      message: 'quota.set was done, but …',
      exitCode: 3,
    });
  });

  it('leaves anything else to show its stack (a bug)', () => {
    expect(cliFailureOf(new TypeError('x is undefined'))).toBeUndefined();
    expect(cliFailureOf(raised('deadlock detected', { code: '40P01' }))).toBeUndefined();
    expect(cliFailureOf('thrown string')).toBeUndefined();
  });

  it('prints one line whatever the message holds', () => {
    expect(cliFailureLine({ code: 'io', message: 'a\n  b' })).toBe('arkvory: io: a b\n');
  });
});
