/**
 * The types every route module and gate shares with the server that runs them: kept apart from
 * http-server.ts so a route, a gate or the request's own state can name them without importing
 * the server (and the server can import those modules without a cycle).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Access } from '../../policy/auth/authorize.ts';
import type { Principal } from '../../policy/auth/principal.ts';
import type { AuditAction } from '../audit/audit-event.ts';
import type { HttpMethod } from './route-table.ts';
import type { RequestTrace } from '../tracing/request-trace.ts';

/**
 * Who may call a route. `public`: anyone. `service`: any valid key. `read`/`write`: a key with a
 * read/write grant on the `:repo` parameter (and the scope). `admin`: a key with the admin scope.
 */
export type { Access };

export interface RequestContext {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly url: URL;
  readonly params: Readonly<Record<string, string>>;
  /** Route template, e.g. `/api/v1/repositories/:repo/artifacts/:id/content`; used in logs and metrics. */
  readonly route: string;
  readonly access: Access;
  /** The gateway's own id for this request (a UUID): the log lines' `reqId`, the audit trail's `requestId`. */
  readonly reqId: string;
  /** The `X-Request-Id` the client sent, when sane: logged as `clientReqId` and echoed in the answer's `x-request-id`. */
  readonly clientReqId: string | undefined;
  readonly log: Logger;
  /** Aborted when the client goes away before the response finished. */
  readonly signal: AbortSignal;
  /** The request's trace (docs/tracing.md); undefined when tracing is off. */
  readonly trace?: RequestTrace | undefined;
  principal: Principal | undefined;
  /** Set when a pre-signed link authenticated the request: the sha256 it was made for (only that is served). */
  linkSha256?: string | undefined;
  /** What an audited route's action produced (ids made, sizes): recorded with it (proxy/audit/). Never a secret. */
  auditDetails?: Record<string, unknown> | undefined;
  /**
   * What an audited route's action was done to, when its parameters do not say it as the CLI
   * records it (a quota's scope, a principal named by its id): recorded instead of the parameters.
   */
  auditTarget?: Record<string, unknown> | undefined;
  /**
   * Set by an audited route once its change is made: a failure after it (a read back for the
   * answer) is answered as usual, and the action is recorded all the same, since it took effect.
   */
  actionTaken?: boolean | undefined;
  /**
   * Sends `100 Continue` when the client asked for it: call once every check that may refuse the
   * request (auth, size, admission) passed and the body is about to be read. Idempotent.
   */
  continueBody(): void;
  /**
   * Records that the request is answered `status` with `code`; true when that is a client fault
   * (request-exchange.ts `isClientFault`), whose lines then go through `faultLine`.
   */
  noteFault(status: number, code: string): boolean;
  /** A client fault's line: at info within the per-code budget, at debug past it. */
  faultLine(fields: Record<string, unknown>, msg: string): void;
}

export interface Route {
  methods: readonly HttpMethod[];
  template: string;
  access: Access;
  handle(ctx: RequestContext): Promise<void>;
  /** A GET streams a published blob: it holds a download admission slot (proxy/gates/transfers.ts). */
  downloads?: boolean;
  /** The handler calls `ctx.continueBody()` itself after its own checks (uploads); default: after the gates. */
  continuesBodyItself?: boolean;
  /**
   * The audit trail's action for a successful (below 400) answer (proxy/audit/audit-event.ts), or
   * null for a step that changes nothing an operator audits (a multipart part, a query). Every
   * route with a method other than GET and HEAD must say which: the server refuses to start otherwise.
   */
  audit?: AuditAction | null;
  /**
   * The audit trail's action for an attempt the gates refused with 401 or 403 (the console's
   * sign-in: `console.sign_in_failed`), recorded within a bound per client address
   * (proxy/audit/request-audit.ts `createRefusalAudit`). Unset: refusals are not audited.
   */
  auditRefusal?: AuditAction;
}

/** Records a route's action once it succeeded; never throws (a failure is logged). */
export type AuditSink = (ctx: RequestContext, action: AuditAction) => Promise<void>;

/** Records a refused attempt at a route (`Route.auditRefusal`) with the error's code; never throws. */
export type RefusalAuditSink = (ctx: RequestContext, action: AuditAction, code: string) => Promise<void>;

/**
 * A gate runs before every handler (auth, then rate limit; admission wraps the content handlers); it
 * throws (or rejects with) a coded error to deny. Undefined means it decided at once, from memory.
 */
export type Gate = (ctx: RequestContext) => undefined | Promise<void>;

/** What the per-request observer (metrics) sees when a response closes: aggregates, no ids. */
export interface RequestObservation {
  readonly method: string;
  /** Route template, `unmatched` when no route matched. */
  readonly route: string;
  readonly status: number;
  readonly seconds: number;
  readonly bytesIn: number;
  readonly bytesOut: number;
  /** The error code when the answer was a client fault (request-exchange.ts `isClientFault`). */
  readonly fault?: string | undefined;
}
