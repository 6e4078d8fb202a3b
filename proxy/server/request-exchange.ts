/**
 * One request and its response as the gates and routes see them (`RequestContext`), plus what the
 * server observes when the response closes (metrics, the access line). A class, not an object
 * literal with getters and closures: its accessors live on the prototype, so a request costs one
 * object, and the lazily made parts (URL, child logger, abort signal) are made only when asked for.
 */
import type { IncomingMessage } from 'node:http';
import { requestByteCounts } from './http2-messages.ts';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { knownMethod } from '../../lib/http-method.ts';
import type { LogBudget } from '../../lib/log-budget.ts';
import type { Access } from '../../policy/auth/authorize.ts';
import type { Principal } from '../../policy/auth/principal.ts';
import { GatewayError } from './errors.ts';
import { CLIENT_CLOSED_REQUEST, recordedStatus } from './recorded-status.ts';
import type { GatewayResponse } from './gateway-response.ts';
import type { RequestContext, RequestObservation } from './route-types.ts';
import type { RequestTrace } from '../tracing/request-trace.ts';
import { TARGET_BASE } from './request-path.ts';

const NO_PARAMS: Readonly<Record<string, string>> = Object.freeze({});

export interface ExchangeServer {
  readonly log: Logger;
  /** Whether the access line is written (info); below that level its fields are not even gathered. */
  readonly logRequests: boolean;
  onRequest?: ((observation: RequestObservation) => void) | undefined;
  /** Called with the request itself when its response closes (usage statistics); must not throw. */
  onUsage?: ((ctx: RequestExchange, observation: RequestObservation) => void) | undefined;
  continueBody(req: IncomingMessage, res: GatewayResponse): void;
  /** Bounds the lines of client faults (`noteFault`); without it every fault is logged. */
  readonly faultLog?: LogBudget | undefined;
}

/**
 * A client fault: a 4xx answer (or a client gone, 499) to a request no principal accounts for (no
 * key or a bad one, a malformed request, a banned address, a link misused). Anyone can send these
 * as fast as they like, so their lines at info are bounded per code (lib/log-budget.ts
 * CLIENT_FAULT_LOG; the rest go to debug), not their answers; a principal's requests are
 * accountable and logged in full.
 */
export function isClientFault(status: number, principal: Principal | undefined): boolean {
  return status >= 400 && status < 500 && principal === undefined;
}

export class RequestExchange implements RequestContext {
  readonly req: IncomingMessage;
  readonly res: GatewayResponse;
  readonly reqId: string;
  readonly clientReqId: string | undefined;
  params: Readonly<Record<string, string>> = NO_PARAMS;
  /** Route template; `unmatched` until a route matched. */
  route = 'unmatched';
  access: Access = 'public';
  principal: Principal | undefined = undefined;
  linkSha256: string | undefined = undefined;
  auditDetails: Record<string, unknown> | undefined = undefined;
  auditTarget: Record<string, unknown> | undefined = undefined;
  actionTaken: boolean | undefined = undefined;
  /** Set by the server when tracing is on; ended with the response. */
  trace: RequestTrace | undefined = undefined;
  readonly #server: ExchangeServer;
  readonly #target: string;
  readonly #startedMs = performance.now();
  readonly #bytes: ReturnType<typeof requestByteCounts>;
  #url: URL | undefined;
  #log: Logger | undefined;
  #controller: AbortController | undefined;
  #closedEarly: GatewayError | undefined;
  /** The error code of the client fault this request was answered with (`noteFault`). */
  fault: string | undefined = undefined;
  /**
   * Lines at debug, not info, its request line too: a fault's lines over the budget, or a request the
   * front door refused (the server sets it).
   */
  quiet = false;
  /** Lines of this fault's code left out before this one, for the line that is written. */
  suppressed = 0;

  constructor(
    server: ExchangeServer,
    req: IncomingMessage,
    res: GatewayResponse,
    reqId: string,
    clientReqId: string | undefined,
    url?: URL,
  ) {
    this.#server = server;
    this.req = req;
    this.res = res;
    this.reqId = reqId;
    this.clientReqId = clientReqId;
    this.#target = req.url ?? '/';
    this.#url = url;
    this.#bytes = requestByteCounts(req, res);
  }

  /** Built when a handler asks for it (the query of a pre-signed link). */
  get url(): URL {
    return (this.#url ??= new URL(this.#target, TARGET_BASE));
  }

  /** Created on first use: most requests never log through it, and a pino child is dear per request. */
  get log(): Logger {
    // pino leaves out a binding that is undefined (no client id, no trace).
    return (this.#log ??= this.#server.log.child({
      reqId: this.reqId,
      clientReqId: this.clientReqId,
      route: this.route,
      traceId: this.trace?.traceId,
    }));
  }

  /** Aborted when the client goes away before the response finished; made on first use (an EventTarget is not free). */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#closedEarly) this.#controller.abort(this.#closedEarly);
    }
    return this.#controller.signal;
  }

  continueBody(): void {
    this.#server.continueBody(this.req, this.res);
  }

  /** Writes a client fault's line: at info within the budget, else at debug (and only if enabled). */
  faultLine(fields: Record<string, unknown>, msg: string): void {
    if (!this.quiet) this.log.info({ ...fields, ...(this.suppressed > 0 ? { suppressed: this.suppressed } : {}) }, msg);
    else if (this.#server.log.isLevelEnabled('debug')) this.log.debug(fields, msg);
  }

  /**
   * Records an answer of `status` with `code`; true when it is a client fault (`isClientFault`),
   * whose lines then follow `quiet` and `suppressed`. False: log as usual.
   */
  noteFault(status: number, code: string): boolean {
    if (this.fault !== undefined) return true;
    if (!isClientFault(status, this.principal)) return false;
    this.fault = code;
    const budget = this.#server.faultLog;
    if (budget) {
      const turn = budget.take(code, performance.now());
      this.quiet = !turn.write;
      this.suppressed = turn.suppressed;
    }
    return true;
  }

  /** The response closed (finished or cut): aborts what still waits, then metrics and the access line. */
  closed(): void {
    const { req, res } = this;
    if (!res.writableFinished) {
      this.#closedEarly = new GatewayError('invalid_request', 'client closed the connection');
      this.#controller?.abort(this.#closedEarly);
    }
    const ms = performance.now() - this.#startedMs;
    const bytesOut = this.#bytes.written();
    const bytesIn = this.#bytes.read();
    this.#bytes.end();
    const server = this.#server;
    const status = recordedStatus(res);
    // A 4xx written without an error (a route's own answer) is a client fault all the same, and so is
    // a client gone before any answer (its route's own line, if any, follows with the same code).
    if (this.fault === undefined)
      this.noteFault(status, status === CLIENT_CLOSED_REQUEST ? 'client_aborted' : String(status));
    const observation: RequestObservation = {
      method: req.method ?? 'GET',
      route: this.route,
      status,
      seconds: ms / 1000,
      bytesIn,
      bytesOut,
      fault: this.fault,
    };
    server.onRequest?.(observation);
    server.onUsage?.(this, observation);
    this.trace?.finish({
      method: req.method ?? 'GET',
      route: this.route,
      status,
      bytesIn,
      bytesOut,
      completed: res.writableFinished,
      principalId: this.principal?.id,
    });
    if (!server.logRequests) return;
    // Over the fault budget the line goes to debug: gone at the default level, there when asked for.
    if (this.quiet && !server.log.isLevelEnabled('debug')) return;
    server.log[this.quiet ? 'debug' : 'info'](
      {
        reqId: this.reqId,
        clientReqId: this.clientReqId,
        traceId: this.trace?.traceId,
        // A method of the client's own (HTTP/2: any token, ~20 KB) is `_OTHER`, never copied here.
        method: knownMethod(req.method),
        route: this.route,
        status,
        bytesOut,
        bytesIn,
        ms: Math.round(ms * 10) / 10,
        principal: this.principal?.id,
        completed: res.writableFinished,
      },
      'request',
    );
  }
}

/** The listener of every response's 'close' (one function for all: `this` is the response). */
export function onResponseClose(this: GatewayResponse): void {
  this.exchange?.closed();
}
