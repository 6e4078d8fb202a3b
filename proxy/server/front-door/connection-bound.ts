/**
 * The bound on open client connections: past it, idle keep-alive connections are closed first, then
 * the oldest that have not sent a request yet, then a new connection gets a fast 503 (health checks
 * still answered), and far past it is closed at once.
 */
import type { Socket } from 'node:net';
import { type GatewayError, OVERLOADED } from '../errors.ts';
import { closeIdle, type ConnectionState, type Connections, isIdleKeepAlive, stateOf } from './connection-state.ts';
import { OVERFLOW_ANSWERED } from './descriptor-budget.ts';

/** How long an over-the-bound connection may take to send its request head. */
const OVERFLOW_HEAD_MS = 2000;

const HEALTH_PATHS = new Set(['/health/live', '/health/status']);

/**
 * What becomes of a new connection once idle ones were closed, given the connections still live:
 * served, answered with a 503 (`refuse`), or closed at once (`cut`: far past the bound the
 * descriptor matters more than an answer).
 */
export function judgeConnection(live: number, maxConnections: number): 'serve' | 'refuse' | 'cut' {
  if (live <= maxConnections) return 'serve';
  return live > maxConnections + OVERFLOW_ANSWERED ? 'cut' : 'refuse';
}

/** The 503 body for a request on an over-the-bound connection; undefined for a health check. */
export function overloadRefusal(method: string | undefined, path: string): GatewayError | undefined {
  return HEALTH_PATHS.has(path) && (method === 'GET' || method === 'HEAD') ? undefined : OVERLOADED;
}

/**
 * A connection that has not sent a whole request head yet (no request served or in progress), and
 * was not itself accepted past the bound.
 */
function awaitsFirstRequest(state: ConnectionState): boolean {
  return state.served === 0 && state.active === 0 && !state.overflow;
}

export class ConnectionBound {
  /** Connections answered 503 or closed because the bound was reached. */
  refused = 0;
  /** Idle connections closed to make room: kept-alive ones between requests, and ones that never sent a request. */
  idleClosed = 0;
  readonly maxConnections: number;
  readonly #connections: Connections;

  constructor(maxConnections: number, connections: Connections) {
    this.maxConnections = maxConnections;
    this.#connections = connections;
  }

  /** Applies the bound to a connection just added to the tracked ones. */
  accept(socket: Socket, state: ConnectionState): void {
    if (this.#connections.size <= this.maxConnections) return;
    // Past the bound: idle keep-alive connections go first. An idle HTTP/2 session is closed with
    // GOAWAY, its socket a moment later: it makes room now all the same (it has no stream to finish).
    const closed = new Set<Socket>();
    for (const other of this.#connections) {
      if (isIdleKeepAlive(stateOf(other)!) && !other.destroyed) {
        closeIdle(other);
        closed.add(other);
        this.idleClosed++;
      }
    }
    let live = 0;
    for (const other of this.#connections) if (!other.destroyed && !other.writableEnded && !closed.has(other)) live++;
    // Then those that have sent no request yet, the oldest first (the set keeps accept order): one
    // client opening connections and sending nothing would otherwise hold the bound for the whole
    // head timeout and every other client would get 503s. A client whose head follows its connect
    // within bound ÷ the rate of new connections keeps its place.
    for (const other of this.#connections) {
      if (live <= this.maxConnections) break;
      if (other === socket || other.destroyed || other.writableEnded || !awaitsFirstRequest(stateOf(other)!)) continue;
      closeIdle(other);
      this.idleClosed++;
      live--;
    }
    const verdict = judgeConnection(live, this.maxConnections);
    if (verdict === 'serve') return;
    this.refused++;
    if (verdict === 'cut') {
      socket.destroy();
      return;
    }
    state.overflow = true;
    const timer = setTimeout(() => socket.destroy(), OVERFLOW_HEAD_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  }
}
