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
 * an operator alerts on the count, not on reading every error line. Refused attempts are recorded
 * only where a route asks for it (the console's sign-in), within a bound: `createRefusalAudit`.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Timers } from '../../policy/timers.ts';
import { ConnectionDeadline, onConnectionWithin } from '../server/connection-deadline.ts';
import { performance } from 'node:perf_hooks';
import { LogBudget } from '../../lib/log-budget.ts';
import { parseAuthorization } from '../../policy/auth/key-format.ts';
import { clientIp, clientKey } from '../gates/request-identity.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import type { AuditSink, RefusalAuditSink, RequestContext } from '../server/route-types.ts';
import type { AuditAction, AuditEntry } from './audit-event.ts';
import { recordAudit } from './audit-log.ts';

/** Longest wait for an audit row before the answer ends without it. */
export const AUDIT_TIMEOUT_MS = 5000;

/** Entries not recorded since the start: the insert failed, or the database did not answer in time. */
export interface AuditFailures {
  failed: number;
  timeout: number;
}

interface AuditDeps {
  pool: pg.Pool;
  log: Logger;
  trusted: TrustedProxies;
  timeoutMs?: number;
  timers?: Timers;
  /** Counted into when an entry is not recorded (the metrics read it). */
  failures?: AuditFailures;
}

export function createRequestAudit(deps: AuditDeps): AuditSink {
  const record = entryRecorder(deps);
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
    // Every audited route needs a principal (admin or write access); this is a wiring fault.
    await record(entry ?? new Error(`audited route ${ctx.route} ran without a principal`), {
      action,
      route: ctx.route,
    });
  };
}

/**
 * What refusals are recorded at most: per client address (its ban key: an IPv6 client by its /64),
 * and in all, per minute. An attacker's failed sign-ins are theirs to multiply; the trail's rows are
 * not. Past a bound a refusal is only counted, and the next entry recorded says how many were left
 * out (`suppressed`: of its address; `suppressedOverall`: of any address, past the overall bound).
 */
export const REFUSAL_AUDIT = { perAddressPerMinute: 5, perMinute: 60, addressesTracked: 1024 } as const;

const MINUTE_MS = 60_000;

/**
 * The audit sink of refused attempts at an audited route that says so (`Route.auditRefusal`, the
 * console's sign-in): a 401 or 403 the gates answered, with its code. The actor is the key's
 * principal when the key is genuine but may not (a 403), else `anonymous`; the target the key id
 * presented, when the credential was a well-formed key (an id is no secret). Never the credential.
 */
export function createRefusalAudit(deps: AuditDeps & { clock?: () => number }): RefusalAuditSink {
  const record = entryRecorder(deps);
  const now = deps.clock ?? (() => performance.now());
  const perAddress = new LogBudget({
    linesPerInterval: REFUSAL_AUDIT.perAddressPerMinute,
    intervalMs: MINUTE_MS,
    maxKinds: REFUSAL_AUDIT.addressesTracked,
  });
  const overall = new LogBudget({ linesPerInterval: REFUSAL_AUDIT.perMinute, intervalMs: MINUTE_MS, maxKinds: 1 });
  // Refusals the overall bound left out since the last entry recorded (their own addresses' counts included).
  let suppressedOverall = 0;
  return async (ctx: RequestContext, action: AuditAction, code: string) => {
    const nowMs = now();
    const source = clientIp(ctx, deps.trusted);
    const turn = perAddress.take(clientKey(ctx, deps.trusted), nowMs);
    if (!turn.write) return;
    if (!overall.take('all', nowMs).write) {
      suppressedOverall += 1 + turn.suppressed;
      return;
    }
    const { principal } = ctx;
    const keyId = parseAuthorization(ctx.req.headers.authorization)?.keyId;
    const details: Record<string, unknown> = { code };
    if (turn.suppressed > 0) details.suppressed = turn.suppressed;
    if (suppressedOverall > 0) details.suppressedOverall = suppressedOverall;
    suppressedOverall = 0;
    await record(
      {
        action,
        actor: principal
          ? { kind: 'principal', principalId: principal.id, principalName: principal.name }
          : { kind: 'anonymous' },
        source,
        requestId: ctx.reqId,
        clientRequestId: ctx.clientReqId,
        target: keyId === undefined ? {} : { keyId },
        details,
      },
      { action, route: ctx.route },
    );
  };
}

/** Writes one entry in its own transaction within the deadline; a failure is counted and logged, never thrown. */
function entryRecorder(deps: AuditDeps) {
  const timeoutMs = deps.timeoutMs ?? AUDIT_TIMEOUT_MS;
  return async (entry: AuditEntry | Error, what: { action: AuditAction; route: string }): Promise<void> => {
    // Sent COMMIT without its answer: the row may yet be there.
    let commitSent = false;
    try {
      if (entry instanceof Error) throw entry;
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
        { err, audit: entry instanceof Error ? what : entry, ...(commitSent ? { unconfirmed: true } : {}) },
        'audit entry not recorded',
      );
    }
  };
}
