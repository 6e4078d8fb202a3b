/**
 * A command's failure as the one line the CLI documents, `arkvory: <code>: <message>`: a coded error,
 * a local file error, a database login without the privilege (exit 1); an audit entry not recorded
 * (exit 3: the change was made). Anything else is a bug and keeps its stack.
 */
import { CodedError } from '../../lib/coded-error.ts';
import { AuditNotRecorded, EXIT_AUDIT_NOT_RECORDED } from './cli-audit.ts';

export interface CliFailure {
  readonly code: string;
  readonly message: string;
  /** The command's exit code. */
  readonly exitCode: 1 | typeof EXIT_AUDIT_NOT_RECORDED;
}

/** PostgreSQL's SQLSTATE for a missing privilege (insufficient_privilege). */
const INSUFFICIENT_PRIVILEGE = '42501';

/** The line's code and message for `err`, or undefined when it is not an expected failure. */
export function cliFailureOf(err: unknown): CliFailure | undefined {
  if (err instanceof AuditNotRecorded)
    return { code: err.code, message: err.message, exitCode: EXIT_AUDIT_NOT_RECORDED };
  if (err instanceof CodedError) return { code: err.code, message: err.message, exitCode: 1 };
  if (!(err instanceof Error)) return undefined;
  const { code, syscall } = err as NodeJS.ErrnoException;
  if (typeof code !== 'string') return undefined;
  if (typeof syscall === 'string') return { code: 'io', message: err.message, exitCode: 1 };
  if (code === INSUFFICIENT_PRIVILEGE)
    return {
      code: 'database_permission',
      message: `the database login lacks a privilege this command needs (${err.message}); admin commands use the writer's login (docs/deploy.md, "Least privilege")`,
      exitCode: 1,
    };
  return undefined;
}

/** The line printed for a failure. */
export function cliFailureLine(failure: Omit<CliFailure, 'exitCode'>): string {
  return `arkvory: ${failure.code}: ${failure.message.replace(/\s*\n\s*/g, ' ')}\n`;
}
