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
