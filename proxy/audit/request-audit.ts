/**
 * The gateway's audit sink: a route's action, once it succeeded, recorded with its principal, the
 * client address (through ARKVORY_TRUSTED_PROXIES), the gateway's request id (and the client's own
 * `X-Request-Id` apart from it), the route's parameters as the
 * target (or what the handler put in `ctx.auditTarget`) and what it put in `ctx.auditDetails`. The server ends the action's answer only
 * after this (proxy/server/http-server.ts). A failed insert does not undo the action: it is logged
 * at error with the whole entry, so the log keeps what the table missed. The insert is its own
 * transaction within AUDIT_TIMEOUT_MS: a database that does not answer holds neither the answer nor
 * a pooled connection longer, and an insert abandoned before its COMMIT can never land afterwards.
 * Each entry not recorded is counted too (`AuditFailures`, arkvory_audit_entries_not_recorded_total):
 * an operator alerts on the count, not on reading every error line.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Timers } from '../../policy/timers.ts';
import { ConnectionDeadline, onConnectionWithin } from '../server/connection-deadline.ts';
import { clientIp } from '../gates/request-identity.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import type { AuditSink, RequestContext } from '../server/route-types.ts';
import type { AuditAction, AuditEntry } from './audit-event.ts';
import { recordAudit } from './audit-log.ts';

/** Longest wait for an audit row before the answer ends without it. */
export const AUDIT_TIMEOUT_MS = 5000;

/** Entries not recorded since the start: the insert failed, or the database did not answer in time. */
export interface AuditFailures {
  failed: number;
  timeout: number;
}

export function createRequestAudit(deps: {
  pool: pg.Pool;
  log: Logger;
  trusted: TrustedProxies;
  timeoutMs?: number;
  timers?: Timers;
  /** Counted into when an entry is not recorded (the metrics read it). */
  failures?: AuditFailures;
}): AuditSink {
  const timeoutMs = deps.timeoutMs ?? AUDIT_TIMEOUT_MS;
  return async (ctx: RequestContext, action: AuditAction) => {
    const { principal } = ctx;
    const entry: AuditEntry | undefined = principal && {
      action,
      actor: { kind: 'principal', principalId: principal.id, principalName: principal.name },
      source: clientIp(ctx, deps.trusted),
      requestId: ctx.reqId,
      clientRequestId: ctx.clientReqId,
      target: ctx.auditTarget ?? { ...ctx.params },
      details: ctx.auditDetails ?? {},
    };
    // Sent COMMIT without its answer: the row may yet be there.
    let commitSent = false;
    try {
      // Every audited route needs a principal (admin or write access); this is a wiring fault.
      if (!entry) throw new Error(`audited route ${ctx.route} ran without a principal`);
      await onConnectionWithin<pg.PoolClient, void>(
        deps.pool,
        timeoutMs,
        async (conn, within) => {
          await within(conn.query('BEGIN'));
          await within(recordAudit(conn, entry));
          commitSent = true;
          await within(conn.query('COMMIT'));
        },
        deps.timers ? { timers: deps.timers } : {},
      );
    } catch (err) {
      if (deps.failures) deps.failures[err instanceof ConnectionDeadline ? 'timeout' : 'failed']++;
      deps.log.error(
        { err, audit: entry ?? { action, route: ctx.route }, ...(commitSent ? { unconfirmed: true } : {}) },
        'audit entry not recorded',
      );
    }
  };
}
