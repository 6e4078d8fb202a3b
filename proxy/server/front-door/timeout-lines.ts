/**
 * The lines of clients the front door timed out (a body that stalled, an answer not taken), over
 * HTTP/1.1 and HTTP/2 alike. Anyone may open connections or streams and then send nothing: every
 * timeout is counted (arkvory_http_client_timeouts_total), but its lines are bounded as every client
 * fault's are (lib/log-budget.ts CLIENT_FAULT_LOG, per phase), the rest at debug, the next written
 * saying how many went there (`suppressed`).
 */
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { CLIENT_FAULT_LOG, LogBudget } from '../../../lib/log-budget.ts';

export interface TimeoutFields {
  readonly code: 'client_timeout';
  readonly phase: 'request_body' | 'response';
  readonly [field: string]: unknown;
}

export class TimeoutLines {
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #budget = new LogBudget(CLIENT_FAULT_LOG);

  /** `now`: a monotonic clock in milliseconds. */
  constructor(log: Logger, now: () => number = () => performance.now()) {
    this.#log = log;
    this.#now = now;
  }

  write(fields: TimeoutFields, message: string): void {
    const turn = this.#budget.take(fields.phase, this.#now());
    if (turn.write) this.#log.info(turn.suppressed > 0 ? { ...fields, suppressed: turn.suppressed } : fields, message);
    else if (this.#log.isLevelEnabled('debug')) this.#log.debug(fields, message);
  }
}
