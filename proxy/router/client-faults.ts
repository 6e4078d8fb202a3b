/**
 * The router's answer to requests it cannot forward (forwardable.ts): 400 `malformed_request` (or
 * the fault's own code) with the reason, a counter per kind that counts every one, and log lines
 * bounded per kind and interval (lib/log-budget.ts) at info, without a stack: a client's fault is
 * not the router's, and 2,000 of them a second must not cost more than a few lines.
 */
import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { CLIENT_FAULT_LOG, LogBudget } from '../../lib/log-budget.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import type { ClientFault, ClientFaultKind } from './forwardable.ts';

/** Per kind: at most this many lines per interval (documented in docs/router.md). */
export const FAULT_LOG_LINES_PER_INTERVAL = CLIENT_FAULT_LOG.linesPerInterval;
export const FAULT_LOG_INTERVAL_MS = CLIENT_FAULT_LOG.intervalMs;

export interface ClientFaults {
  /** Answers 400 for `fault`, counts it, and logs it if the kind's budget allows. */
  refuse(res: ServerResponse, fault: ClientFault, ids: RequestIds, method: string | undefined): void;
  /** A head Node's parser refused (already answered by the server's clientError handler). */
  noteMalformedHead(parserCode: string | undefined): void;
}

/** The router's own id of a request, and the sane `X-Request-Id` its client sent (router-server.ts). */
export interface RequestIds {
  readonly reqId: string;
  readonly clientReqId: string | undefined;
}

export function createClientFaults(options: {
  log: Logger;
  /** Counts every fault by kind (the router's `arkvory_router_client_faults_total`). */
  count: (kind: ClientFaultKind) => void;
  nowMs?: () => number;
  linesPerInterval?: number;
  intervalMs?: number;
}): ClientFaults {
  const { log, count } = options;
  const nowMs = options.nowMs ?? (() => performance.now());
  const budget = new LogBudget({
    linesPerInterval: options.linesPerInterval ?? FAULT_LOG_LINES_PER_INTERVAL,
    intervalMs: options.intervalMs ?? FAULT_LOG_INTERVAL_MS,
  });
  const note = (kind: ClientFaultKind, code: string, fields: Record<string, unknown>) => {
    count(kind);
    const turn = budget.take(kind, nowMs());
    if (!turn.write) return;
    log.info(
      { ...fields, kind, code, ...(turn.suppressed > 0 ? { suppressed: turn.suppressed } : {}) },
      'client fault: request not forwarded',
    );
  };
  return {
    refuse(res, fault, { reqId, clientReqId }, method) {
      const err = new GatewayError(fault.code ?? 'malformed_request', fault.message);
      sendJson(
        res,
        400,
        { code: err.code, message: err.message },
        // The connection may carry more of the same: close it, as Node does after a parse error.
        { 'x-request-id': clientReqId ?? reqId, connection: 'close' },
      );
      note(fault.kind, err.code, { reqId, clientReqId, method });
    },
    noteMalformedHead(parserCode) {
      note('malformed_head', 'malformed_request', { parserCode });
    },
  };
}
