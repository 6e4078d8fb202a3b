/**
 * A GET sent to a gateway through undici's dispatcher: the read path, where the router's cost per
 * request matters most. Why undici there: a relay over `Pool.dispatch` with a handler of its own
 * costs less CPU per small request than the same relay over `http.request` (no ClientRequest and
 * IncomingMessage streams per request, no agent bookkeeping per socket hand-over), and it hands a
 * body over as views of the socket's reads instead of copies (docs/router.md, "Proxying").
 *
 * Each body chunk of RELEASE_MIN_BYTES or more is freed once the client's socket took it
 * (relay-chunks.ts, lib/release-buffer.ts): a chunk that is a whole socket read is nobody else's by then (undici only
 * puts back into the socket the part of a read it has not handed out, and a whole read has none);
 * release-reads.int.test.ts holds undici to that. A smaller chunk or a view of part of a read
 * is left to the collector.
 */
import type { ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { UpstreamCall, UpstreamResponse } from './proxied-request.ts';
import { writeFreeing } from './relay-chunks.ts';

/** The attempt's side: where the head and an early failure go. */
export interface ExchangeListener {
  onResponse(response: UpstreamResponse): void;
  onError(err: Error): void;
}

/** One GET's exchange: the dispatcher's handler, the attempt's UpstreamCall and, once the head is in, its UpstreamResponse. */
export class DispatchedExchange implements Dispatcher.DispatchHandler, UpstreamCall, UpstreamResponse {
  /** 0 until the head is in. */
  status = 0;
  rawHeaders: string[] = [];
  connection: string | string[] | undefined = undefined;
  readonly #listener: ExchangeListener;
  #controller: Dispatcher.DispatchController | undefined;
  /** Response bytes so far; -1 until the request is on a connection. */
  #bytes = -1;
  /** A cut asked for before the dispatcher started the request. */
  #cut: Error | undefined;
  #sink: ServerResponse | undefined;
  #done: ((err?: Error) => void) | undefined;
  #drainHooked = false;
  /** Paused until the client takes what was written (backpressure). */
  #pausedForClient = false;
  /** Told when a discarded body ended or was cut. */
  #discarded: (() => void) | undefined;

  constructor(listener: ExchangeListener) {
    this.#listener = listener;
  }

  moved(): number {
    return this.#bytes;
  }

  waitsOnClient(): boolean {
    return this.#pausedForClient;
  }

  destroy(err?: Error): void {
    const reason = err ?? new Error('the exchange was cut');
    if (this.#controller) this.#controller.abort(reason);
    else this.#cut ??= reason;
  }

  relayTo(res: ServerResponse, done: (err?: Error) => void): void {
    this.#sink = res;
    this.#done = done;
  }

  discard(done: () => void): void {
    // Data keeps flowing into onResponseData with no sink: read and dropped, the connection stays.
    this.#sink = undefined;
    this.#discarded = done;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#cut) {
      controller.abort(this.#cut);
      return;
    }
    this.#bytes = 0;
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // undici reports a 1xx (a 103 Early Hints) here too; the final head follows on the same request.
    // Not relayed: the client's connection may be HTTP/2, and hints are an optimisation.
    if (statusCode < 200) return;
    this.status = statusCode;
    this.rawHeaders = headerStrings(controller.rawHeaders);
    this.connection = headers.connection;
    this.#listener.onResponse(this);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#bytes += chunk.byteLength;
    const res = this.#sink;
    if (res === undefined) return;
    if (writeFreeing(res, chunk)) return;
    controller.pause();
    this.#pausedForClient = true;
    if (!this.#drainHooked) {
      this.#drainHooked = true;
      res.on('drain', () => {
        this.#pausedForClient = false;
        this.#controller?.resume();
      });
    }
  }

  onResponseEnd(): void {
    const res = this.#sink;
    if (res === undefined) {
      this.#discarded?.();
      return;
    }
    res.end();
    this.#done?.();
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    if (this.#done) this.#done(error);
    else if (this.status === 0) this.#listener.onError(error);
    // Headed and not relayed: a discarded body cut (by the idle sweep), or one the attempt dropped.
    else this.#discarded?.();
  }
}

/**
 * The gateway's head as node:http's rawHeaders (name, value, …). Over HTTP/1.1 undici gives it raw,
 * as Buffers (views of the socket's read): latin1 strings, byte for byte as received, names as spelled
 * and repeated fields in order. Over HTTP/2 (an https gateway, by ALPN) it gives node:http2's header
 * object instead: its fields in order, a repeated one as an array, the pseudo-headers left out.
 */
function headerStrings(raw: Dispatcher.DispatchController['rawHeaders'] | Record<string, unknown>): string[] {
  if (raw === null || raw === undefined) return [];
  if (!Array.isArray(raw)) {
    const out: string[] = [];
    for (const [name, value] of Object.entries(raw)) {
      if (name.startsWith(':') || value === undefined) continue;
      if (Array.isArray(value)) for (const each of value) out.push(name, String(each));
      else out.push(name, String(value));
    }
    return out;
  }
  const out = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const item = raw[i]!;
    out[i] = typeof item === 'string' ? item : item.toString('latin1');
  }
  return out;
}
