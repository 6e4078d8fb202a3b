/**
 * The admission slots the coordinating process lent this worker (slot-lending.ts), held unused by
 * principal and kind: a request of that principal and kind takes one at once, without a call, and
 * puts it back when its transfer ends. They go back to the coordinating process (`giveBack`, one
 * release note each) when it asks (`recall`: a request could not be admitted at once), when they
 * sat unused through a whole sweep interval, and when the worker closes or is fenced. How many are
 * held unused is reported at most once per turn of the event loop (`report`): the instance counts
 * them active until then.
 */
import type { TransferKind } from '../../policy/admission/index.ts';
import type { TimerHandle, Timers } from '../../policy/timers.ts';
import type { ReadyCounts } from './slot-lending.ts';

/** Slots held unused through one whole interval go back at its end. */
export const READY_SWEEP_MS = 1000;

interface Lane {
  readonly ids: number[];
  /** The fewest held unused since the last sweep: that many were not needed in the interval. */
  least: number;
}

export interface ReadySlotsDeps {
  giveBack(id: number): void;
  report(counts: ReadyCounts): void;
  timers: Timers;
  /** Runs the report after this turn's work (default `setImmediate`). */
  later?: (callback: () => void) => void;
}

export class ReadySlots {
  readonly #deps: ReadySlotsDeps;
  readonly #later: (callback: () => void) => void;
  readonly #lanes: Record<TransferKind, Map<string, Lane>> = { download: new Map(), upload: new Map() };
  readonly #counts: ReadyCounts = { download: 0, upload: 0 };
  /** Told to give back that kind's slots: a slot of it ending goes back too, until more are lent. */
  readonly #recalled: Record<TransferKind, boolean> = { download: false, upload: false };
  #closed = false;
  #reportDue = false;
  #reported: ReadyCounts = { download: 0, upload: 0 };
  #sweep: TimerHandle | undefined;

  constructor(deps: ReadySlotsDeps) {
    this.#deps = deps;
    this.#later = deps.later ?? ((callback) => setImmediate(callback));
  }

  /** Held unused, by kind. */
  get counts(): Readonly<ReadyCounts> {
    return this.#counts;
  }

  /** Slots lent with an admission of `principalId`'s `kind`. */
  add(principalId: string, kind: TransferKind, ids: readonly number[]): void {
    if (ids.length === 0) return;
    if (this.#closed) {
      for (const id of ids) this.#deps.giveBack(id);
      return;
    }
    this.#recalled[kind] = false;
    const lane = this.#lane(principalId, kind, ids.length);
    lane.ids.push(...ids);
    this.#changed(kind, ids.length);
  }

  /** One of `principalId`'s slots of `kind` held unused, now in use; undefined when none is held. */
  take(principalId: string, kind: TransferKind): number | undefined {
    const lane = this.#lanes[kind].get(principalId);
    const id = lane?.ids.pop();
    if (id === undefined) return undefined;
    lane!.least = Math.min(lane!.least, lane!.ids.length);
    this.#changed(kind, -1);
    return id;
  }

  /** A slot taken here is no longer in use: held again, or given back once recalled or closed. */
  put(principalId: string, kind: TransferKind, id: number): void {
    if (this.#closed || this.#recalled[kind]) {
      this.#deps.giveBack(id);
      return;
    }
    this.#lane(principalId, kind, 0).ids.push(id);
    this.#changed(kind, 1);
  }

  /** The coordinating process needs slots of `kind`: every one held unused goes back, and each in use as it ends. */
  recall(kind: TransferKind): void {
    this.#recalled[kind] = true;
    this.#giveBackAll(kind);
  }

  /** The worker stops (closing, fenced): every slot held goes back, and each in use as it ends. */
  close(): void {
    this.#closed = true;
    this.#giveBackAll('download');
    this.#giveBackAll('upload');
    if (this.#sweep !== undefined) this.#deps.timers.clearTimeout(this.#sweep);
    this.#sweep = undefined;
  }

  #giveBackAll(kind: TransferKind): void {
    let given = 0;
    for (const lane of this.#lanes[kind].values()) {
      for (const id of lane.ids) this.#deps.giveBack(id);
      given += lane.ids.length;
    }
    this.#lanes[kind].clear();
    if (given > 0) this.#changed(kind, -given);
  }

  #lane(principalId: string, kind: TransferKind, least: number): Lane {
    const lanes = this.#lanes[kind];
    let lane = lanes.get(principalId);
    if (lane === undefined) {
      lane = { ids: [], least };
      lanes.set(principalId, lane);
    }
    return lane;
  }

  #changed(kind: TransferKind, by: number): void {
    this.#counts[kind] += by;
    if (!this.#reportDue) {
      this.#reportDue = true;
      this.#later(this.#report);
    }
    if (this.#sweep === undefined && !this.#closed && this.#counts.download + this.#counts.upload > 0)
      this.#sweep = this.#deps.timers.setTimeout(this.#sweepNow, READY_SWEEP_MS);
  }

  readonly #report = (): void => {
    this.#reportDue = false;
    const { download, upload } = this.#counts;
    if (download === this.#reported.download && upload === this.#reported.upload) return;
    this.#reported = { download, upload };
    this.#deps.report(this.#reported);
  };

  /** Each lane gives back the slots it did not need since the last sweep. */
  readonly #sweepNow = (): void => {
    this.#sweep = undefined;
    for (const kind of ['download', 'upload'] as const) {
      let given = 0;
      for (const [principalId, lane] of this.#lanes[kind]) {
        const unused = lane.ids.splice(0, lane.least);
        for (const id of unused) this.#deps.giveBack(id);
        given += unused.length;
        if (lane.ids.length === 0) this.#lanes[kind].delete(principalId);
        else lane.least = lane.ids.length;
      }
      if (given > 0) this.#changed(kind, -given);
    }
    if (this.#sweep === undefined && this.#counts.download + this.#counts.upload > 0)
      this.#sweep = this.#deps.timers.setTimeout(this.#sweepNow, READY_SWEEP_MS);
  };
}
