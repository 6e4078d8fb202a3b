/**
 * What one HTTP/2 session's answers may hold toward a client that does not read. node:http2 keeps
 * every byte an answer wrote until the client's flow-control window lets it out, and an answer in
 * progress keeps its stream, request, response and handler state until it ends, so a client that
 * announces a zero window and opens its 100 streams would have each of them hold its whole answer
 * (a small body or a JSON error written in one go, a streamed body's buffers) and that state. Two
 * bounds per session, both measured by the caller:
 *  - answers in progress: a new stream's handler runs only while the answers in progress count
 *    less than `SEND_BUDGET.bytes` with `answerBytes` each plus their queued bytes (32 at most), so
 *    a burst of streams whose handlers all wait on I/O before writing is bounded as well as one
 *    whose answers are already queued; past it, the stream waits before its handler runs;
 *  - queued bytes: a streamed body's next chunk is read only while the bytes written and not yet
 *    taken (and the chunks about to be) are less than `SEND_BUDGET.bytes`.
 * A chunk never waits for answers' shares, only for bytes: the answers in progress are what makes
 * them go out, so a session full of answers still streams. Each bound's waiters go on first come,
 * first served, as bytes go out or answers end.
 *
 * What lets it go is `StallWatch`: an answer holding unsent bytes that sent none for the send
 * timeout is stalled, and the front door resets it. node:http2's own send timeout of a stream cannot
 * be that bound: it is pushed back whenever its session sends anything (another stream's reset, a
 * PING's ack), so a client that pings keeps a stalled answer forever, and 100 stalled streams
 * time out one per timeout, each reset pushing back the others. The same holds for the body timeout
 * of a stream whose answer began before its request body ended: the watch judges those by the
 * body timeout.
 *
 * The budget and the answers' progress are read by the caller (front-door/http2.ts); time comes
 * from the injected timers, so this is tested without a socket (http2-send-budget.test.ts).
 */
import type { TimerHandle, Timers } from '../../../policy/timers.ts';

export const SEND_BUDGET = {
  /** Bytes a session's answers may hold queued, and with their shares, before more wait. */
  bytes: 1024 * 1024,
  /**
   * What an answer in progress holds besides its queued bytes (its stream, request, response and
   * handler state: about 20 KiB measured on a zero-window client, where a stream waiting for its
   * handler holds about 3 KiB): 32 such answers fill the budget.
   */
  answerBytes: 32 * 1024,
} as const;

/** What an answer being written sees of its session's budget (proxy/content/stream.ts). */
export interface AnswerBudget {
  /** True when a chunk may be written now: no chunk waits and the session's queued bytes are below its budget. */
  hasRoom(): boolean;
  /** Resolves once there is room for a chunk; rejects with the signal's reason if it aborts first. */
  room(signal: AbortSignal): Promise<void>;
  /**
   * Counts `bytes` as held before they are written: a chunk about to be read, so the streams of a
   * session that all find room at once do not each read a chunk past the budget. `unreserve` once
   * the chunk was written (its bytes are then queued, and measured) or dropped.
   */
  reserve(bytes: number): void;
  unreserve(bytes: number): void;
  /** Some bytes of an answer went out to the client. */
  sent(): void;
}

export interface SendBudgetLimits {
  readonly bytes: number;
  readonly answerBytes: number;
}

/** What a session's answers hold now. */
export interface Held {
  /** Answers in progress: handlers started whose bytes are not all out. */
  readonly answers: number;
  /** Bytes those answers wrote that the client has not taken yet. */
  readonly queued: number;
}

/** One session's budget: `held` measures what its answers in progress hold now. */
export class SendBudget implements AnswerBudget {
  readonly #limits: SendBudgetLimits;
  readonly #held: () => Held;
  /** In arrival order (a Set keeps it): chunks of streamed bodies. */
  readonly #chunks = new Set<() => void>();
  /** In arrival order: handlers of new streams. */
  readonly #starts = new Set<() => void>();
  #reserved = 0;
  #ended = false;
  /** Handlers and chunks that waited here (`arkvory_http2_send_budget_waits_total`). */
  waited = 0;

  constructor(limits: SendBudgetLimits, held: () => Held) {
    this.#limits = limits;
    this.#held = held;
  }

  /** Waiting now: handlers and chunks. */
  get waiting(): number {
    return this.#chunks.size + this.#starts.size;
  }

  hasRoom(): boolean {
    return this.#chunks.size === 0 && this.#chunkRoom(0);
  }

  /** True when a new stream's handler may run now: no handler waits and the answers in progress leave room for one more. */
  mayStart(): boolean {
    return this.#starts.size === 0 && this.#startRoom();
  }

  reserve(bytes: number): void {
    this.#reserved += bytes;
  }

  unreserve(bytes: number): void {
    this.#reserved -= bytes;
  }

  /** A chunk: `resume` is called once there is room (never after `end`); `cancel(resume)` takes it back. */
  wait(resume: () => void): void {
    if (this.#ended) return;
    this.waited++;
    this.#chunks.add(resume);
  }

  /**
   * A new stream's handler: `resume` is called once the answers in progress leave room, and must
   * begin its answer at once (counted by the next `held`); `cancel(resume)` takes it back.
   */
  waitToStart(resume: () => void): void {
    if (this.#ended) return;
    this.waited++;
    this.#starts.add(resume);
  }

  cancel(resume: () => void): void {
    this.#chunks.delete(resume);
    this.#starts.delete(resume);
  }

  room(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => {
        this.cancel(resume);
        reject(signal.reason);
      };
      const resume = () => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.wait(resume);
    });
  }

  /** Bytes went out (a chunk's write completed, an answer ended) or were let go (a stream reset): waiters resume while there is room. */
  sent(): void {
    if (this.#chunks.size > 0) this.#resumeChunks();
    if (this.#starts.size > 0) this.#resumeStarts();
  }

  /** The session is gone: nothing waits. */
  end(): void {
    this.#ended = true;
    this.#chunks.clear();
    this.#starts.clear();
  }

  #chunkRoom(promised: number): boolean {
    return this.#held().queued + this.#reserved + promised < this.#limits.bytes;
  }

  #startRoom(): boolean {
    const { answers, queued } = this.#held();
    return answers * this.#limits.answerBytes + queued + this.#reserved < this.#limits.bytes;
  }

  #resumeChunks(): void {
    // A resumed chunk is reserved only once its stream runs again: each is counted as one answer's
    // share meanwhile, so a release never lets through more than the budget's room.
    let promised = 0;
    while (!this.#ended && this.#chunks.size > 0 && this.#chunkRoom(promised)) {
      const next = this.#chunks.values().next().value!;
      this.#chunks.delete(next);
      promised += this.#limits.answerBytes;
      next();
    }
  }

  #resumeStarts(): void {
    // A resumed handler begins its answer at once: the next `held` counts it.
    while (!this.#ended && this.#starts.size > 0 && this.#startRoom()) {
      const next = this.#starts.values().next().value!;
      this.#starts.delete(next);
      next();
    }
  }
}

/** The timeout a stalled answer is judged by: its request body's while that is still due, else the send timeout. */
export type StallPhase = 'send' | 'body';

export interface StallLimits {
  /** No progress for this while the request body is complete: the answer is stalled (send timeout). */
  readonly sendMs: number;
  /** No progress for this while the request body is still due: the body is stalled (body timeout). */
  readonly bodyMs: number;
}

/**
 * Finds a session's stalled answers: every period (the shorter of the two timeouts) while it has
 * answers, an answer holding unsent bytes whose progress (bytes sent, and request body bytes
 * received) has not moved since a check at least its timeout ago is stalled. So an answer is cut
 * once it made no progress for its timeout, at most two periods later (one to two timeouts when
 * both are equal), whatever else its session sends.
 * An answer whose request body is still due is judged by the body timeout and reported as the
 * body's stall: node:http2's own body timeout of a stream is pushed back by the session's frames as
 * soon as the stream has bytes queued (an early answer, a 408, a download that announced a body,
 * toward a client that takes none of it). One timer per session, armed by the first answer and
 * kept while there are any.
 */
export class StallWatch<K> {
  readonly #limits: StallLimits;
  readonly #periodMs: number;
  readonly #timers: Timers;
  readonly #progress: StallProgress<K>;
  readonly #stalled: (answers: K[], phase: StallPhase) => void;
  /** Each answer that had unsent bytes at the last check: its progress then, and the check since which it has not moved. */
  #seen = new Map<K, { readonly progress: number; readonly since: number }>();
  /** Checks run so far: time in periods. */
  #checks = 0;
  #timer: TimerHandle | undefined;
  #ended = false;

  constructor(
    limits: StallLimits,
    timers: Timers,
    progress: StallProgress<K>,
    stalled: (answers: K[], phase: StallPhase) => void,
  ) {
    this.#limits = limits;
    this.#periodMs = Math.min(limits.sendMs, limits.bodyMs);
    this.#timers = timers;
    this.#progress = progress;
    this.#stalled = stalled;
  }

  /** An answer began: the checks run (cheap when they already do). */
  answering(): void {
    if (this.#timer === undefined && !this.#ended) this.#arm();
  }

  end(): void {
    this.#ended = true;
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#seen.clear();
  }

  #arm(): void {
    this.#timer = this.#timers.setTimeout(() => this.#check(), this.#periodMs);
  }

  #check(): void {
    this.#timer = undefined;
    if (this.#ended) return;
    const check = ++this.#checks;
    const { answers, progressOf, unsentOf, bodyDue } = this.#progress;
    const seen = new Map<K, { readonly progress: number; readonly since: number }>();
    const stalled: Record<StallPhase, K[]> = { send: [], body: [] };
    let answering = false;
    for (const answer of answers()) {
      answering = true;
      if (unsentOf(answer) === 0) continue;
      const progress = progressOf(answer);
      const was = this.#seen.get(answer);
      const since = was !== undefined && was.progress === progress ? was.since : check;
      const phase: StallPhase = bodyDue(answer) ? 'body' : 'send';
      const limitMs = phase === 'body' ? this.#limits.bodyMs : this.#limits.sendMs;
      if ((check - since) * this.#periodMs >= limitMs) stalled[phase].push(answer);
      else seen.set(answer, { progress, since });
    }
    this.#seen = seen;
    if (answering) this.#arm();
    if (stalled.send.length > 0) this.#stalled(stalled.send, 'send');
    if (stalled.body.length > 0) this.#stalled(stalled.body, 'body');
  }
}

/** What `StallWatch` reads of a session's answers. */
export interface StallProgress<K> {
  readonly answers: () => Iterable<K>;
  /** Grows with each byte the answer sent and each request body byte received: unchanged, no progress. */
  readonly progressOf: (answer: K) => number;
  /** Bytes the answer wrote that the client has not taken yet: none, nothing to judge. */
  readonly unsentOf: (answer: K) => number;
  /** Its request body is still due (not all received). */
  readonly bodyDue: (answer: K) => boolean;
}
