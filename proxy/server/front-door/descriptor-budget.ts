/**
 * The front door's bounds against the process's descriptor limit (soft RLIMIT_NOFILE): what the
 * connections it serves, the refusals it answers and the TLS handshakes it lets run may hold at
 * once, beside a reserve for the gateway's own descriptors, must fit within the limit, or a client
 * filling the bounds would leave the process at EMFILE and every other client, blob open and
 * database connection failing with it. A derived bound is chosen to fit; a configured one that does
 * not fit refuses the start (proxy/server/serve.ts). Pure but for `descriptorLimit`.
 */
import { readFileSync } from 'node:fs';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

/**
 * Descriptors kept for everything that is not a client connection: Node's own (stdio, epoll, the
 * thread pool's), the log, the listeners, the database pool (10 by default) with the lease and
 * notification connections, Redis, a worker's IPC channel. A TLS gateway with the defaults holds
 * about 40 of them.
 */
export const RESERVED_DESCRIPTORS = 64;
/** Connections past the bound that still get an answer (a 503 or a health check) before being cut. */
export const OVERFLOW_ANSWERED = 32;
/** The smallest connection bound, derived or configured (ARKVORY_MAX_CONNECTIONS's floor). */
export const MIN_CONNECTIONS = 8;
/** The limit assumed where it cannot be read (no /proc): Linux's usual soft default. */
export const ASSUMED_DESCRIPTOR_LIMIT = 1024;

/**
 * The descriptors the front door may hold at once under a bound of `maxConnections`: two per
 * connection (its socket and a blob or temporary file, or the router's upstream socket), one per
 * refusal answered past the bound, on a TLS listener one per handshake in progress (counted apart
 * from connections, pending-handshakes.ts), and the reserve.
 */
export function descriptorsNeeded(maxConnections: number, tls: boolean): number {
  return (
    2 * maxConnections +
    OVERFLOW_ANSWERED +
    (tls ? defaultMaxPendingHandshakes(maxConnections) : 0) +
    RESERVED_DESCRIPTORS
  );
}

/**
 * The largest bound whose needs fit within `limit`, and never below MIN_CONNECTIONS (a limit too
 * small for even that is reported by `planFrontDoor`).
 */
export function defaultMaxConnections(limit: number, tls = false): number {
  // Close to the answer from the needs' slope (2 per connection, plus 1/8 on TLS), then exact.
  let bound = Math.floor(((limit - OVERFLOW_ANSWERED - RESERVED_DESCRIPTORS) * (tls ? 8 : 1)) / (tls ? 17 : 2));
  while (descriptorsNeeded(bound + 1, tls) <= limit) bound++;
  while (bound > MIN_CONNECTIONS && descriptorsNeeded(bound, tls) > limit) bound--;
  return Math.max(MIN_CONNECTIONS, bound);
}

/** The soft "Max open files" of a /proc/<pid>/limits text; undefined when absent or unlimited. */
export function parseMaxOpenFiles(limits: string): number | undefined {
  const line = limits.split('\n').find((l) => l.startsWith('Max open files'));
  const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
  if (soft === undefined || !/^\d+$/.test(soft)) return undefined;
  return Number(soft);
}

/** The soft RLIMIT_NOFILE of this process (Linux: /proc/self/limits); undefined when unknown. */
export function descriptorLimit(): number | undefined {
  try {
    return parseMaxOpenFiles(readFileSync('/proc/self/limits', 'utf8'));
  } catch {
    return undefined;
  }
}

export interface FrontDoorPlanInput {
  /** This process's soft descriptor limit; undefined when unknown. */
  readonly limit: number | undefined;
  /** ARKVORY_MAX_CONNECTIONS, the instance's; undefined = derived per process. */
  readonly configured: number | undefined;
  /** The processes serving the port: a configured bound is split between them. */
  readonly workers: number;
  /** Whether the listener serves TLS (handshakes in progress then hold descriptors too). */
  readonly tls: boolean;
}

export interface FrontDoorPlan {
  /** The bound each serving process applies. */
  readonly maxConnections: number;
  /** Each process's bound on TLS handshakes in progress; 0 on plain HTTP. */
  readonly maxPendingHandshakes: number;
  /** The limit the plan was made against (ASSUMED_DESCRIPTOR_LIMIT when unknown). */
  readonly limit: number;
  readonly limitKnown: boolean;
  /** Descriptors the bounds may hold at once in one process (`descriptorsNeeded`). */
  readonly needed: number;
  /**
   * `fits`; `short`: derived, but the limit is below even the smallest bound's needs (the start goes
   * on, warned); `too_high`: configured above what the limit holds (the start is refused).
   */
  readonly verdict: 'fits' | 'short' | 'too_high';
  /** The largest ARKVORY_MAX_CONNECTIONS the limit holds (for the instance: per process × workers). */
  readonly largestConfigurable: number;
}

/** The front door's bounds for one serving process, and whether they fit its descriptor limit. */
export function planFrontDoor(input: FrontDoorPlanInput): FrontDoorPlan {
  const limit = input.limit ?? ASSUMED_DESCRIPTOR_LIMIT;
  const fitting = defaultMaxConnections(limit, input.tls);
  const maxConnections =
    input.configured === undefined ? fitting : Math.floor(input.configured / Math.max(1, input.workers));
  const needed = descriptorsNeeded(maxConnections, input.tls);
  let verdict: FrontDoorPlan['verdict'] = 'fits';
  // An unknown limit cannot refuse what an operator set: it is only an assumption.
  if (needed > limit && input.limit !== undefined) verdict = input.configured === undefined ? 'short' : 'too_high';
  return {
    maxConnections,
    maxPendingHandshakes: input.tls ? defaultMaxPendingHandshakes(maxConnections) : 0,
    limit,
    limitKnown: input.limit !== undefined,
    needed,
    verdict,
    largestConfigurable: descriptorsNeeded(fitting, input.tls) <= limit ? fitting * Math.max(1, input.workers) : 0,
  };
}

/** The one line an operator reads about a plan that does not fit (the start's warning or refusal). */
export function describeShortfall(plan: FrontDoorPlan, input: FrontDoorPlanInput): string {
  const perProcess = input.workers > 1 ? ` per worker of ${input.workers}` : '';
  const handshakes = plan.maxPendingHandshakes > 0 ? ` + ${plan.maxPendingHandshakes} TLS handshakes in progress` : '';
  const needs = `2 × ${plan.maxConnections} connections${handshakes} + ${OVERFLOW_ANSWERED} refusals answered + ${RESERVED_DESCRIPTORS} for the gateway's own = ${plan.needed} descriptors${perProcess}, above the descriptor limit of ${plan.limit} (ulimit -n, systemd LimitNOFILE)`;
  if (plan.verdict === 'too_high') {
    const lower = plan.largestConfigurable > 0 ? `set it to at most ${plan.largestConfigurable} or ` : '';
    return `ARKVORY_MAX_CONNECTIONS=${input.configured} cannot be honoured: it needs ${needs}; ${lower}raise the limit`;
  }
  return `the descriptor limit is below what the smallest connection bound needs: ${needs}; raise the limit (clients may meet EMFILE failures)`;
}
