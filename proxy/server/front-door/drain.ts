/**
 * The drain at shutdown: idle keep-alive connections are closed, every later answer closes its
 * connection, and new requests other than the health checks get a fast 503, so a balancer's
 * readiness probe sees the drain instead of a refused connection.
 */
import { DRAINING, type GatewayError } from '../errors.ts';
import { closeIdle, type Connections, isIdleKeepAlive, stateOf } from './connection-state.ts';

/** While draining, readiness is answered too (503 `draining`), so a balancer sees why. */
const DRAIN_PATHS = new Set(['/health/live', '/health/status', '/health/ready']);

/** The 503 for a request that arrives while draining; undefined for a health check. */
export function drainRefusal(method: string | undefined, path: string): GatewayError | undefined {
  return DRAIN_PATHS.has(path) && (method === 'GET' || method === 'HEAD') ? undefined : DRAINING;
}

/** Closes every keep-alive connection waiting between requests. */
export function closeIdleConnections(connections: Connections): void {
  for (const socket of connections) if (isIdleKeepAlive(stateOf(socket)!)) closeIdle(socket);
}
