/**
 * Which requests the bandwidth governors pace (proxy/gates/transfers.ts): while one of a request's
 * takes waits for its bytes, the connection is silent by the gateway's doing (its principal's turn
 * in the fair order, the ceiling's refill), not the client's, and the idle timeouts leave it be.
 * A weight or a crowd of principals may space one principal's quanta further apart than the send
 * or body timeout; cut there, its transfer would fail where the documented share only slows it.
 */
import type { IncomingMessage } from 'node:http';

/** What is read of a meter: whether a take of it waits now. */
export interface PacingMeter {
  readonly waiting?: boolean | undefined;
}

const meters = new WeakMap<IncomingMessage, PacingMeter>();

/** `req`'s body (upload or download) is paced by `meter`. */
export function pacedBy(req: IncomingMessage, meter: PacingMeter): void {
  meters.set(req, meter);
}

/** Whether a take of the meter pacing `req` waits now. */
export function isPacing(req: IncomingMessage): boolean {
  return meters.get(req)?.waiting === true;
}
