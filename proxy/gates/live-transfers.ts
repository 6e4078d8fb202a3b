/**
 * The transfers of this process right now (the console lists them): one entry per body request from the
 * moment it asks for an admission slot (queued) until it ends, with the bytes its connection moved
 * so far. Holds no secrets (principal name, route template, repository). The table itself is
 * bounded only by the admission limits, whose queues are per principal (ARKVORY_ADMISSION_QUEUE_LENGTH
 * each), so thousands of principals can have tens of thousands waiting: `list` gives the oldest
 * `LIVE_TRANSFERS_SHOWN`, and `size` says how many there are.
 */
import type { Clock } from '../../policy/clock.ts';

/** The transfers the console's status answer lists, oldest first (it counts the others). */
export const LIVE_TRANSFERS_SHOWN = 100;

export interface LiveTransferInfo {
  kind: 'download' | 'upload';
  principal: string;
  route: string;
  repository: string | undefined;
  /** Bytes moved so far (the connection's counters since the request began). */
  bytes: () => number;
  /**
   * Throws the refusal (401, 403, 404) once the request's credential no longer admits it (a key
   * revoked, a principal disabled, a grant removed), or another error when that cannot be told now.
   * Absent: the transfer is not asked again (an upload is, once its body is staged).
   */
  stillAuthorized?: () => undefined | Promise<void>;
  /** Ends the transfer at once, its stream reset: called with the refusal `stillAuthorized` threw. */
  cut?: (refusal: Error) => void;
}

/** Questions a recheck round has in flight at once (`LiveTransfers.recheck`). */
export const RECHECK_CONCURRENCY = 8;

const REFUSALS: ReadonlySet<unknown> = new Set(['unauthorized', 'forbidden', 'not_found']);

/** Whether `stillAuthorized` refused (401, 403, 404); anything else (503 `unavailable`) leaves the transfer be, to be asked again. */
export function isRefusal(err: unknown): boolean {
  return typeof err === 'object' && err !== null && REFUSALS.has((err as { code?: unknown }).code);
}

export interface LiveTransfer {
  readonly id: number;
  readonly kind: 'download' | 'upload';
  readonly state: 'queued' | 'active';
  readonly principal: string;
  readonly route: string;
  readonly repository: string | null;
  readonly seconds: number;
  readonly bytes: number;
}

export interface LiveTransferHandle {
  admitted(): void;
  end(): void;
}

export class LiveTransfers {
  readonly #clock: Clock;
  readonly #entries = new Map<number, { info: LiveTransferInfo; state: 'queued' | 'active'; startedMs: number }>();
  #nextId = 1;

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  begin(info: LiveTransferInfo): LiveTransferHandle {
    const id = this.#nextId++;
    const entry = { info, state: 'queued' as 'queued' | 'active', startedMs: this.#clock.monotonicMs() };
    this.#entries.set(id, entry);
    return {
      admitted: () => {
        entry.state = 'active';
      },
      end: () => {
        this.#entries.delete(id);
      },
    };
  }

  /** How many transfers there are now. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Asks each transfer that can be asked whether it may go on, and cuts those refused. Resolves
   * `retry` when one could not be told (the database out of reach): the caller asks again later.
   */
  async recheck(concurrency = RECHECK_CONCURRENCY): Promise<'done' | 'retry'> {
    let retry = false;
    const infos = [...this.#entries.values()].map((e) => e.info).filter((info) => info.stillAuthorized !== undefined);
    let next = 0;
    // A few at a time: the caches were just cleared, and the first question of a key or principal
    // fills them for the many transfers that share it, instead of each sending the same query.
    const asker = async () => {
      while (next < infos.length) {
        const info = infos[next++]!;
        try {
          await info.stillAuthorized!();
        } catch (err) {
          if (isRefusal(err)) info.cut?.(err as Error);
          else retry = true;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, infos.length) }, asker));
    return retry ? 'retry' : 'done';
  }

  /** The oldest `max` (a Map iterates in insertion order), oldest first; the others are not read. */
  list(max = LIVE_TRANSFERS_SHOWN): LiveTransfer[] {
    const now = this.#clock.monotonicMs();
    const out: LiveTransfer[] = [];
    for (const [id, e] of this.#entries) {
      if (out.length >= max) break;
      out.push({
        id,
        kind: e.info.kind,
        state: e.state,
        principal: e.info.principal,
        route: e.info.route,
        repository: e.info.repository ?? null,
        seconds: Math.max(0, Math.round((now - e.startedMs) / 100) / 10),
        bytes: e.info.bytes(),
      });
    }
    return out;
  }
}

/**
 * Asks the running transfers again whenever `onChange` reports a change that may revoke access (the
 * auth caches cleared: a NOTIFY, or the epoch poll seeing it moved, at most 500 ms + the poll's
 * round trip after the change), one round at a time: a change during a round runs one more, and a
 * round that could not tell (the database out of reach) is tried again every `retryMs` until it can.
 * Returns a stop function.
 */
export function recheckOnChange(
  live: LiveTransfers,
  onChange: (listener: () => void) => void,
  retryMs = 500,
): () => void {
  let running = false;
  let again = false;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const run = async () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        if ((await live.recheck()) === 'retry' && timer === undefined && !stopped) {
          timer = setTimeout(() => {
            timer = undefined;
            void run();
          }, retryMs);
          timer.unref();
        }
      } while (again && !stopped);
    } finally {
      running = false;
    }
  };
  // Not inside the watcher's own call: its poll or notification handler goes on first.
  onChange(() => void setImmediate(() => void run()));
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
