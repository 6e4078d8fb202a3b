/**
 * Calls between the coordinating process and its workers over the cluster IPC channel: a request
 * with an id, answered once; a caller may cancel it (the answering side aborts the work's signal).
 * Both sides use the same class over their end of the channel. Errors cross as their catalogue
 * code, message and headers, so a `busy` from the coordinating process is a `busy` in the worker.
 */
import { PolicyError } from '../../policy/errors.ts';

/** The two ends: `process` in a worker, a cluster `Worker` in the coordinating process. */
export interface Channel {
  /** With a callback a closed channel is reported to it; without one it is an `'error'` event. */
  send(message: unknown, callback: (err: Error | null) => void): unknown;
  on(event: 'message', listener: (message: unknown) => void): unknown;
}

export type Handler = (args: unknown, signal: AbortSignal) => unknown;

interface WireError {
  code: string | undefined;
  message: string;
  headers: Record<string, string | string[]> | undefined;
}

type Message =
  | { arkvory: 'call'; id: number; op: string; args: unknown }
  | { arkvory: 'cancel'; id: number }
  | { arkvory: 'note'; op: string; args: unknown }
  | { arkvory: 'answer'; id: number; value: unknown }
  | { arkvory: 'failure'; id: number; error: WireError };

/** What crosses the channel: one message, or the several one turn of the event loop produced, in order. */
type Envelope = Message | { arkvory: 'batch'; messages: Message[] };

interface Pending {
  resolve(value: unknown): void;
  reject(err: unknown): void;
}

/** The error the answering side threw, as the caller sees it: a PolicyError when it had a policy code. */
function fromWire(error: WireError): Error {
  if (error.code !== undefined && POLICY_CODES.has(error.code))
    return new PolicyError(error.code as never, error.message, error.headers ? { headers: error.headers } : undefined);
  return new Error(error.message);
}

const POLICY_CODES = new Set(['busy', 'unavailable', 'lease_lost', 'rate_limited', 'rate_limit_unavailable']);

function toWire(err: unknown): WireError {
  const coded = err as { code?: unknown; message?: unknown; headers?: Record<string, string | string[]> };
  return {
    code: typeof coded?.code === 'string' ? coded.code : undefined,
    message: typeof coded?.message === 'string' ? coded.message : String(err),
    headers: coded?.headers && Object.keys(coded.headers).length > 0 ? coded.headers : undefined,
  };
}

/**
 * Messages written to the channel and not yet taken by it past which a new call is refused at once
 * (`unavailable`, retry in a second). The channel takes a write once the other side reads: one that
 * stands still (stopped, stuck in a synchronous task) would otherwise hold every request's call, and
 * its serialised bytes, for as long as it stands still. A healthy side keeps this in the tens.
 * Answers, notes and cancels are still sent past it: a release or a cancel dropped would hold a slot.
 */
export const MAX_UNSENT_MESSAGES = 10_000;

/**
 * Calls given up on whose answer has not come (`#late`) past which a new call that would have to wait
 * for its late answer (one with `onLate`: an admission, a repository's transfer, a console session)
 * is refused at once (`unavailable`, retry in a second). A side that stands still while its pipe
 * takes writes (the socket buffers) answers none of them, and one is given up on per request. An
 * entry is never dropped: its answer may carry a slot or a session that must be handed back, which
 * only the answer names. So the map holds at most this many, plus the calls already on their way
 * when it was reached (each given up on at its deadline); it empties as the late answers come.
 */
export const MAX_LATE_CALLS = 10_000;

export class Link {
  readonly #channel: Channel;
  readonly #handlers = new Map<string, Handler>();
  readonly #pending = new Map<number, Pending>();
  /** Calls this side is answering, by the caller's id: cancelling one aborts its signal. */
  readonly #answering = new Map<number, AbortController>();
  /** Calls the caller gave up on whose answer must still be seen (see `call`). */
  readonly #late = new Map<number, (value: unknown) => void>();
  readonly #maxLateCalls: number;
  #nextId = 1;
  #closed = false;
  /** Messages of this turn of the event loop, sent together once it has run (see `#send`). */
  #outbox: Message[] = [];
  /** Messages handed to the channel that it has not yet written (`MAX_UNSENT_MESSAGES`). */
  #unsent = 0;

  constructor(channel: Channel, options: { maxLateCalls?: number } = {}) {
    this.#channel = channel;
    this.#maxLateCalls = options.maxLateCalls ?? MAX_LATE_CALLS;
    channel.on('message', (message) => this.#receive(message));
  }

  /** Calls this side made that still wait for their answer (one given up on no longer does). */
  get waiting(): number {
    return this.#pending.size;
  }

  /** Calls given up on whose answer this side still waits for, to hand back what it grants (`MAX_LATE_CALLS`). */
  get late(): number {
    return this.#late.size;
  }

  /** What a call or note named `op` from the other side runs; its value (or promise) is the answer. */
  handle(op: string, handler: Handler): void {
    this.#handlers.set(op, handler);
  }

  /**
   * Asks the other side; with `signal`, an abort rejects at once with its reason and cancels the call
   * there. An answer that was already on its way when the caller gave up goes to `onLate` (a slot
   * granted in that instant is released there, not leaked); a call with `onLate` is refused at once
   * while `MAX_LATE_CALLS` answers given up on are still awaited.
   */
  call<T>(op: string, args?: unknown, signal?: AbortSignal, onLate?: (value: T) => void): Promise<T> {
    if (this.#closed) return Promise.reject(new PolicyError('unavailable'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#unsent >= MAX_UNSENT_MESSAGES)
      return Promise.reject(
        new PolicyError('unavailable', "The instance's coordinating process is not reading; retry shortly.", {
          headers: { 'retry-after': '1' },
        }),
      );
    if (onLate && this.#late.size >= this.#maxLateCalls)
      return Promise.reject(
        new PolicyError('unavailable', "The instance's coordinating process is not answering; retry shortly.", {
          headers: { 'retry-after': '1' },
        }),
      );
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        this.#pending.delete(id);
        if (onLate) this.#late.set(id, onLate as (value: unknown) => void);
        this.#send({ arkvory: 'cancel', id });
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#pending.set(id, {
        resolve: (value) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value as T);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      });
      this.#send({ arkvory: 'call', id, op, args });
    });
  }

  /** Tells the other side without waiting for an answer. */
  note(op: string, args?: unknown): void {
    this.#send({ arkvory: 'note', op, args });
  }

  /**
   * The other side is gone: every call waiting for it fails with `unavailable`, and so does every new
   * one; what it sent and this side had not yet read is dropped.
   */
  close(): void {
    this.#closed = true;
    for (const pending of this.#pending.values()) pending.reject(new PolicyError('unavailable'));
    this.#pending.clear();
    this.#late.clear();
    for (const controller of this.#answering.values()) controller.abort(new PolicyError('unavailable'));
    this.#answering.clear();
  }

  /**
   * Queues `message`; what a turn of the event loop queued leaves in one channel write once the turn
   * has run. Each write is serialised and written on its own and read and parsed on its own on the
   * other side: under many small requests (an admission and its release each) one per message cost
   * the workers more CPU than the requests' own work.
   */
  #send(message: Message): void {
    if (this.#closed) return;
    if (this.#outbox.push(message) === 1) setImmediate(this.#flush);
  }

  readonly #flush = (): void => {
    const batch = this.#outbox;
    this.#outbox = [];
    if (this.#closed) return;
    const envelope: Envelope = batch.length === 1 ? batch[0]! : { arkvory: 'batch', messages: batch };
    this.#unsent += batch.length;
    try {
      // The callback is what keeps a send to a process that just died (its exit not yet seen here)
      // from becoming an unhandled 'error' event, which would take this process down with it; an
      // error there is that closed channel, whose exit handler closes this link.
      this.#channel.send(envelope, () => {
        this.#unsent -= batch.length;
      });
    } catch {
      // The channel closed under us: the exit handler closes this link.
      this.#unsent -= batch.length;
    }
  };

  #receive(raw: unknown): void {
    // The other side is gone: a call it sent just before (still in the pipe) must grant nothing,
    // since nothing would ever release it.
    if (this.#closed) return;
    const envelope = raw as Envelope;
    if (typeof envelope !== 'object' || envelope === null || !('arkvory' in envelope)) return;
    if (envelope.arkvory !== 'batch') this.#take(envelope);
    else if (Array.isArray(envelope.messages)) for (const message of envelope.messages) this.#take(message);
  }

  #take(message: Message): void {
    // A message of a batch read after the link closed (an answer granted to a gone side) grants nothing either.
    if (this.#closed || typeof message !== 'object' || message === null) return;
    switch (message.arkvory) {
      case 'answer':
      case 'failure': {
        const pending = this.#pending.get(message.id);
        if (!pending) {
          // Cancelled here first: only a late answer's resource needs handing back.
          const late = this.#late.get(message.id);
          this.#late.delete(message.id);
          if (late && message.arkvory === 'answer') late(message.value);
          return;
        }
        this.#pending.delete(message.id);
        if (message.arkvory === 'answer') pending.resolve(message.value);
        else pending.reject(fromWire(message.error));
        return;
      }
      case 'cancel':
        this.#answering.get(message.id)?.abort(new PolicyError('unavailable'));
        return;
      case 'note':
        this.#tell(message.op, message.args);
        return;
      case 'call':
        this.#answer(message.id, message.op, message.args);
    }
  }

  /**
   * Runs a note's handler. Nobody waits for its outcome, so a failure (a malformed note, already
   * reported by the handler's own checks; a call's op sent as a note) ends here: thrown, it would
   * leave the channel's message event and take this process down, the other side's messages of the
   * same write unread; rejected, it would be an unhandled rejection, which ends the process too.
   */
  #tell(op: string, args: unknown): void {
    try {
      const outcome = this.#handlers.get(op)?.(args, new AbortController().signal);
      if (outcome instanceof Promise) outcome.catch(() => {});
    } catch {
      // See above: the note changed nothing.
    }
  }

  #answer(id: number, op: string, args: unknown): void {
    const handler = this.#handlers.get(op);
    if (!handler) {
      this.#send({
        arkvory: 'failure',
        id,
        error: { code: undefined, message: `no handler for ${op}`, headers: undefined },
      });
      return;
    }
    // Ids are the caller's and never reused while answered: a second call under one would take the
    // first's cancel (and the first's answer would drop the second's), so what the second waits for
    // (an admission) could no longer be cancelled when its caller is gone, and be granted to nobody.
    if (this.#answering.has(id)) {
      this.#send({
        arkvory: 'failure',
        id,
        error: { code: undefined, message: `call id ${id} is already being answered`, headers: undefined },
      });
      return;
    }
    const controller = new AbortController();
    this.#answering.set(id, controller);
    let outcome: Promise<unknown>;
    try {
      outcome = Promise.resolve(handler(args, controller.signal));
    } catch (err) {
      outcome = Promise.reject(err);
    }
    outcome.then(
      (value) => {
        this.#answering.delete(id);
        this.#send({ arkvory: 'answer', id, value });
      },
      (err: unknown) => {
        this.#answering.delete(id);
        this.#send({ arkvory: 'failure', id, error: toWire(err) });
      },
    );
  }
}
