/** A gate in a child span of the request's (`arkvory.auth`, `arkvory.rate_limit`); untraced requests run it bare. */
import type { Gate } from '../server/route-types.ts';
import { endFailed } from './request-trace.ts';

export function tracedGate(name: string, gate: Gate): Gate {
  return (ctx) => {
    const request = ctx.trace;
    if (request === undefined || !request.isRecording) return gate(ctx);
    const span = request.startChild(name);
    request.gateSpan = span;
    let pending: undefined | Promise<void>;
    try {
      pending = gate(ctx);
    } catch (err) {
      request.gateSpan = undefined;
      endFailed(span, err);
      throw err;
    }
    if (pending === undefined) {
      request.gateSpan = undefined;
      span.end();
      return undefined;
    }
    return pending.then(
      () => {
        request.gateSpan = undefined;
        span.end();
      },
      (err: unknown) => {
        request.gateSpan = undefined;
        endFailed(span, err);
        throw err;
      },
    );
  };
}
