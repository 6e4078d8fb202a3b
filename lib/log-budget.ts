/**
 * A bound on how many log lines one kind of event may write per interval (pure: the caller passes
 * the time). Repeated client faults are an attacker's to multiply; their lines are not: the first
 * `linesPerInterval` of a kind in each interval are written, the rest only counted, and the next
 * line written for that kind says how many were left out since the last one.
 */
export interface LogBudgetOptions {
  /** Lines each kind may write per interval (at least 1). */
  readonly linesPerInterval: number;
  readonly intervalMs: number;
  /**
   * Kinds tracked at once; a kind past it shares one slot with the others past it. A kind whose
   * interval has ended gives its place up to a new one once the table is full: kinds an
   * attacker chooses (client addresses) would otherwise fill the table for good, and every kind
   * after them share one budget for the life of the process.
   */
  readonly maxKinds?: number;
}

/**
 * The budget for repeated client faults, the router's and the gateway's alike (docs/router.md,
 * docs/auth.md): per kind, 5 lines a minute.
 */
export const CLIENT_FAULT_LOG = { linesPerInterval: 5, intervalMs: 60_000 } as const;

/** `write`: log this one; `suppressed`: lines of this kind left out since its last written line. */
export interface LogTurn {
  readonly write: boolean;
  readonly suppressed: number;
}

interface Window {
  startMs: number;
  written: number;
  suppressed: number;
}

// Stryker disable next-line StringLiteral: equivalent: any name of the shared slot will do
const OVERFLOW_KIND = '(other)';
const SKIP: LogTurn = { write: false, suppressed: 0 };

export class LogBudget {
  readonly #linesPerInterval: number;
  readonly #intervalMs: number;
  readonly #maxKinds: number;
  readonly #windows = new Map<string, Window>();

  constructor(options: LogBudgetOptions) {
    if (!(options.linesPerInterval >= 1) || !(options.intervalMs > 0))
      throw new RangeError('LogBudget needs linesPerInterval >= 1 and intervalMs > 0');
    this.#linesPerInterval = Math.floor(options.linesPerInterval);
    this.#intervalMs = options.intervalMs;
    this.#maxKinds = options.maxKinds ?? 64;
  }

  /** One event of `kind` at `nowMs`: whether to write its line. */
  take(kind: string, nowMs: number): LogTurn {
    let key = kind;
    let window = this.#windows.get(key);
    if (!window) {
      if (this.#windows.size >= this.#maxKinds) this.#sweep(nowMs);
      if (this.#windows.size >= this.#maxKinds) key = OVERFLOW_KIND;
      window = this.#windows.get(key);
      if (!window) {
        window = { startMs: nowMs, written: 0, suppressed: 0 };
        this.#windows.set(key, window);
      }
    }
    if (nowMs - window.startMs >= this.#intervalMs || nowMs < window.startMs) {
      window.startMs = nowMs;
      window.written = 0;
    }
    if (window.written >= this.#linesPerInterval) {
      window.suppressed++;
      return SKIP;
    }
    window.written++;
    const suppressed = window.suppressed;
    window.suppressed = 0;
    return { write: true, suppressed };
  }

  /**
   * Drops the windows whose interval has ended: the next event of their kind would start afresh
   * anyway. (What one had suppressed since its last line is then not reported.) Run for each new kind
   * while the table is full: a walk over at most `maxKinds` windows (64), cheaper than keeping when
   * the next one could end.
   */
  #sweep(nowMs: number): void {
    for (const [kind, window] of this.#windows)
      if (nowMs - window.startMs >= this.#intervalMs || nowMs < window.startMs) this.#windows.delete(kind);
  }
}
