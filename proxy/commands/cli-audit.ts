/**
 * The audit trail from the CLI: an admin or maintenance command that changed something records it
 * as the operator's (OS user and host), from `cli`, with one request id per command run. The change
 * is made first; a failure to record it is reported (stderr, exit EXIT_AUDIT_NOT_RECORDED) rather than hidden.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type pg from 'pg';
import type { Actor, AuditAction } from '../audit/audit-event.ts';
import { recordAudit } from '../audit/audit-log.ts';

const RUN_ID = randomUUID();

/** The operator running this command: the OS user (or $USER when the system has no entry) and the host. */
export function operatorActor(): Actor {
  let operator: string;
  try {
    operator = os.userInfo().username;
  } catch {
    operator = process.env.USER ?? process.env.LOGNAME ?? `uid:${process.getuid?.() ?? 'unknown'}`;
  }
  return { kind: 'operator', operator, host: os.hostname() };
}

export interface CliAction {
  readonly action: AuditAction;
  readonly target: Readonly<Record<string, unknown>>;
  readonly details?: Readonly<Record<string, unknown>>;
}

/**
 * Exit code of every command whose change was done but whose audit entry was not recorded: not 1, so
 * a script tells a change made (0 or 3; a key created, a backup written) from one that failed (1),
 * and does not make it again.
 */
export const EXIT_AUDIT_NOT_RECORDED = 3;

export class AuditNotRecorded extends Error {
  override readonly name = 'AuditNotRecorded';
  /** Printed as `arkvory: audit_not_recorded: …` (exit EXIT_AUDIT_NOT_RECORDED, cli-failure.ts). */
  readonly code = 'audit_not_recorded';
}

/** Records a CLI action; throws AuditNotRecorded (naming the action, which was done) when it cannot. */
export async function recordCliAction(db: Pick<pg.Pool, 'query'> | pg.ClientBase, done: CliAction): Promise<void> {
  try {
    await recordAudit(db, {
      action: done.action,
      actor: operatorActor(),
      source: 'cli',
      requestId: RUN_ID,
      target: done.target,
      details: done.details ?? {},
    });
  } catch (err) {
    throw new AuditNotRecorded(
      `${done.action} was done, but its audit entry was not recorded: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

/**
 * Exit code of a rule change whose store lost the connection while committing it
 * (`store_outcome_unknown`): it may or may not have landed. Not 0 (it is not confirmed), not 1 (it
 * may have been made), not 3 (it is audited).
 */
export const EXIT_OUTCOME_UNKNOWN = 4;

/**
 * Runs a change; one failed with `store_outcome_unknown` is recorded all the same, its details saying
 * `outcome: unknown` (a change that did land is never missing from the audit trail), is reported on
 * stderr naming `check` (the command that tells whether it landed), and exits EXIT_OUTCOME_UNKNOWN,
 * also when that entry cannot be recorded (reported on stderr as such, never as a change done).
 */
export async function changeOrUnknownOutcome(
  command: string,
  check: string,
  db: Pick<pg.Pool, 'query'>,
  audit: CliAction,
  change: () => Promise<number>,
): Promise<number> {
  try {
    return await change();
  } catch (err) {
    if ((err as { code?: unknown } | null)?.code !== 'store_outcome_unknown') throw err;
    process.stderr.write(
      `arkvory ${command}: store_outcome_unknown: ${(err as Error).message}; check with \`${check}\` before running it again\n`,
    );
    try {
      await recordCliAction(db, { ...audit, details: { outcome: 'unknown', ...audit.details } });
    } catch (unrecorded) {
      if (!(unrecorded instanceof AuditNotRecorded)) throw unrecorded;
      // Not AuditNotRecorded's own line and exit 3: that one says the change was done.
      process.stderr.write(
        `arkvory ${command}: audit_not_recorded: ${audit.action} may or may not have been done, and its audit entry was not recorded: ${(unrecorded.cause as Error).message}\n`,
      );
    }
    return EXIT_OUTCOME_UNKNOWN;
  }
}
