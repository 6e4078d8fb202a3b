/**
 * The gateway's audit sink: a route's action, once it succeeded, recorded with its principal, the
 * client address (through ARKVORY_TRUSTED_PROXIES), the gateway's request id (and the client's own
 * `X-Request-Id` apart from it), the route's parameters as the
 * target (or what the handler put in `ctx.auditTarget`) and what it put in `ctx.auditDetails`. The server ends the action's answer only
 * after this (proxy/server/http-server.ts). A failed insert does not undo the action: it is logged
 * at error with the whole entry, so the log keeps what the table missed.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { clientIp } from '../gates/request-identity.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import type { AuditSink, RequestContext } from '../server/route-types.ts';
import type { AuditAction, AuditEntry } from './audit-event.ts';
import { recordAudit } from './audit-log.ts';

export function createRequestAudit(deps: { pool: pg.Pool; log: Logger; trusted: TrustedProxies }): AuditSink {
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
    try {
      // Every audited route needs a principal (admin or write access); this is a wiring fault.
      if (!entry) throw new Error(`audited route ${ctx.route} ran without a principal`);
      await recordAudit(deps.pool, entry);
    } catch (err) {
      deps.log.error({ err, audit: entry ?? { action, route: ctx.route } }, 'audit entry not recorded');
    }
  };
}
