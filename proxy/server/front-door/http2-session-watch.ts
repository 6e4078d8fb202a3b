/**
 * The clock-driven part of one HTTP/2 session's front door, without the session: when it has idled
 * long enough to be closed, and when a client's control frames or stream resets are a flood. Time
 * comes from the injected clock and timers (policy/clock.ts, policy/timers.ts), so the bounds are
 * tested to the millisecond without a socket (http2-session-watch.test.ts); front-door/http2.ts
 * feeds it the session's events and acts on its verdicts.
 */
import type { Clock } from '../../../policy/clock.ts';
import type { TimerHandle, Timers } from '../../../policy/timers.ts';

/** PING and SETTINGS frames a client may send per window before its session ends. */
export const CONTROL_FRAME_BUDGET = { frames: 500, windowMs: 10_000 } as const;
/** Streams a client may reset per window before its session ends (rapid reset). */
export const RESET_BUDGET = { resets: 200, windowMs: 10_000 } as const;

/** Counts events in fixed windows: true once more than `max` fell in the current one. */
export class WindowCounter {
  readonly max: number;
  readonly windowMs: number;
  #windowStart = Number.NEGATIVE_INFINITY;
  #count = 0;

  constructor(max: number, windowMs: number) {
    this.max = max;
    this.windowMs = windowMs;
  }

  /** Counts one at `nowMs`; true when the budget is exceeded. */
  hit(nowMs: number): boolean {
    if (nowMs - this.#windowStart >= this.windowMs) {
      this.#windowStart = nowMs;
      this.#count = 0;
    }
    return ++this.#count > this.max;
  }
}

/** The flood a session was ended for. */
export type FloodKind = 'ping' | 'settings' | 'reset';

export interface SessionWatchLimits {
  /** No first stream within this: the session is idle (nginx's client_header_timeout). */
  readonly headersTimeoutMs: number;
  /** No stream open for this after the last one closed: idle (keepalive_timeout). */
  readonly keepAliveTimeoutMs: number;
}

export interface SessionVerdicts {
  /** The session had no stream open for its idle timeout: close it (GOAWAY). */
  idle(): void;
  /** The client went over a frame budget: end the session (GOAWAY ENHANCE_YOUR_CALM). Called once. */
  flood(kind: FloodKind): void;
}

export interface SessionWatchDeps {
  readonly clock: Clock;
  readonly timers: Timers;
}

/** One session's idle timer and flood budgets. */
export class SessionWatch {
  readonly #limits: SessionWatchLimits;
  readonly #deps: SessionWatchDeps;
  readonly #verdicts: SessionVerdicts;
  readonly #control = new WindowCounter(CONTROL_FRAME_BUDGET.frames, CONTROL_FRAME_BUDGET.windowMs);
  readonly #resets = new WindowCounter(RESET_BUDGET.resets, RESET_BUDGET.windowMs);
  #open = 0;
  #idle: TimerHandle | undefined;
  #ended = false;
  #flooded = false;

  /** Starts watching: the first stream must come within the head timeout. */
  constructor(limits: SessionWatchLimits, deps: SessionWatchDeps, verdicts: SessionVerdicts) {
    this.#limits = limits;
    this.#deps = deps;
    this.#verdicts = verdicts;
    this.#armIdle(limits.headersTimeoutMs);
  }

  /** Streams open now. */
  get openStreams(): number {
    return this.#open;
  }

  streamOpened(): void {
    this.#open++;
    this.#clearIdle();
  }

  /** A stream closed; `resetByClient` when the client ended it with RST_STREAM (an error code). */
  streamClosed(resetByClient: boolean): void {
    this.#open--;
    if (resetByClient && this.#resets.hit(this.#deps.clock.monotonicMs())) this.#flood('reset');
    if (this.#open === 0 && !this.#ended) this.#armIdle(this.#limits.keepAliveTimeoutMs);
  }

  /**
   * Streams the client opened that node:http2 reset before any request (a header list past its
   * bound, refused over the concurrency bound): resets all the same, which no stream event shows.
   */
  streamsRefused(count: number): void {
    const nowMs = this.#deps.clock.monotonicMs();
    for (let i = 0; i < count; i++) if (this.#resets.hit(nowMs)) this.#flood('reset');
  }

  /** The client sent a PING or a SETTINGS frame. */
  controlFrame(kind: 'ping' | 'settings'): void {
    if (this.#control.hit(this.#deps.clock.monotonicMs())) this.#flood(kind);
  }

  /** The session is gone: nothing more is decided. */
  end(): void {
    this.#ended = true;
    this.#clearIdle();
  }

  #flood(kind: FloodKind): void {
    if (this.#flooded || this.#ended) return;
    this.#flooded = true;
    this.#verdicts.flood(kind);
  }

  #armIdle(ms: number): void {
    this.#clearIdle();
    this.#idle = this.#deps.timers.setTimeout(() => {
      this.#idle = undefined;
      if (this.#open === 0 && !this.#ended) this.#verdicts.idle();
    }, ms);
  }

  #clearIdle(): void {
    if (this.#idle === undefined) return;
    this.#deps.timers.clearTimeout(this.#idle);
    this.#idle = undefined;
  }
}
