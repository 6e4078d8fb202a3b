/**
 * An upload's body as the store reads it, with the client's part in its failures kept apart: it
 * remembers that reading it failed (the client went away, its body timed out, a check on the body
 * refused it), so the store's health does not take that for the store's failure (tracked-store.ts);
 * and a cut request stream fails with a coded client error instead of Node's `aborted` (whose
 * `ECONNRESET` reads like a store that went away, and which a store may replace with its own error).
 */
import type { IncomingMessage } from 'node:http';
import { hasStableCode } from '../../storage-adapter/streaming/http-upstream.ts';
import { GatewayError } from '../server/errors.ts';

export class ClientBody implements AsyncIterable<Uint8Array> {
  readonly #req: IncomingMessage;
  readonly #source: AsyncIterable<Uint8Array>;
  #failed = false;

  /** `source`: the request's bytes, perhaps through the route's own checks (the request itself when absent). */
  constructor(req: IncomingMessage, source?: AsyncIterable<Uint8Array>) {
    this.#req = req;
    // A refused body must not destroy the request: that resets the connection before the client
    // can read the answer; the front door lingers instead.
    this.#source = source ?? req.iterator({ destroyOnReturn: false });
  }

  /** Reading the body failed: whatever the store then reports is not the store's fault. */
  get failed(): boolean {
    return this.#failed;
  }

  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    const inner = this.#source[Symbol.asyncIterator]();
    // A plain iterator, no generator: one more promise per chunk at most.
    const fail = (err: unknown): never => {
      this.#failed = true;
      throw this.#clientError(err);
    };
    return {
      next: () => inner.next().then(undefined, fail),
      return: (value?: unknown) =>
        inner.return ? inner.return(value) : Promise.resolve({ done: true as const, value: undefined }),
    };
  }

  #clientError(err: unknown): unknown {
    const req = this.#req;
    // Our own refusals (sizes, quotas) keep their code; so does a failure while the request is whole.
    if (hasStableCode(err) || !(req.destroyed && !req.readableEnded)) return err;
    return new GatewayError('invalid_request', 'The request body stopped before its end: the client went away.', {
      cause: err,
    });
  }
}
