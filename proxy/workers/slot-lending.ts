/**
 * Admission slots the coordinating process lends a worker with an admission it asked for, so that
 * worker admits its next requests of the same principal and kind without a call (ready-slots.ts).
 * A call and its answer per request cost a small request about a quarter of its CPU (docs/architecture.md,
 * "Workers"); a lent slot is a real one, taken from the admission queue and counted there, so both
 * caps stay the instance's and exact.
 *
 * Lending never takes a slot someone could wait for: only while nobody of that kind waits, only half
 * of what is spare (shared among the workers), and the moment a request cannot be admitted at once,
 * every worker holding lent slots of its kind is told to give back the ones it is not using
 * (`recall`); the request waits in the queue as always and gets the first one back. Slots a worker
 * holds ready are not transfers: `ready` is what the instance's snapshot takes from its active count.
 */
import type { AdmissionQueue, Release, TransferKind } from '../../policy/admission/index.ts';

/** Most slots lent with one admission. */
export const LEND_AT_MOST = 8;

/** The note telling a worker to give back the lent slots of a kind it is not using. */
export const RECALL = 'admission.recall';

/** The note in which a worker says how many lent slots it holds unused, by kind. */
export const READY = 'admission.ready';

export type ReadyCounts = Record<TransferKind, number>;

interface Lent {
  /** The ids of the slots lent and not given back, by kind (a release note names one). */
  readonly ids: Record<TransferKind, Set<number>>;
  /** Told to give back that kind's slots since it was last lent one. */
  readonly recalled: Record<TransferKind, boolean>;
  /** What the worker last said it holds unused. */
  ready: ReadyCounts;
}

/** A worker's end as seen from here: it is told with notes. */
export interface Borrower {
  note(op: string, args?: unknown): void;
}

export class SlotLending {
  readonly #admission: AdmissionQueue;
  readonly #workers: number;
  readonly #lent = new Map<Borrower, Lent>();

  constructor(admission: AdmissionQueue, workers: number) {
    this.#admission = admission;
    this.#workers = Math.max(1, workers);
  }

  /**
   * Lends `borrower` slots of `principalId`'s `kind` beside the one it was just granted, each kept
   * under the id `hold` gives it (the id its release note names); the ids lent, maybe none.
   */
  lend(borrower: Borrower, principalId: string, kind: TransferKind, hold: (release: Release) => number): number[] {
    const spare = this.#admission.spare(principalId, kind);
    const count = Math.min(LEND_AT_MOST, Math.floor(spare / (2 * this.#workers)));
    if (count === 0) return [];
    const lent = this.#of(borrower);
    const ids: number[] = [];
    for (let i = 0; i < count; i++) {
      const release = this.#admission.tryAcquire(principalId, kind);
      if (release === undefined) break;
      const id = hold(release);
      lent.ids[kind].add(id);
      ids.push(id);
    }
    lent.recalled[kind] = false;
    return ids;
  }

  /** A slot `borrower` held is given back (lent or not: an id not lent is ignored). */
  released(borrower: Borrower, id: number): void {
    const lent = this.#lent.get(borrower);
    if (lent === undefined) return;
    lent.ids.download.delete(id);
    lent.ids.upload.delete(id);
  }

  /** A request of `kind` cannot be admitted at once: every worker holding such lent slots gives back its unused ones. */
  recall(kind: TransferKind): void {
    for (const [borrower, lent] of this.#lent) {
      if (lent.recalled[kind] || lent.ids[kind].size === 0) continue;
      lent.recalled[kind] = true;
      borrower.note(RECALL, kind);
    }
  }

  /** What `borrower` says it holds unused. */
  reported(borrower: Borrower, ready: ReadyCounts): void {
    this.#of(borrower).ready = ready;
  }

  /**
   * Lent slots held unused, of `kind`, by every worker: each worker's last word, no more than it still
   * holds (a report can trail the slots it gave back).
   */
  ready(kind: TransferKind): number {
    let ready = 0;
    for (const lent of this.#lent.values()) ready += Math.min(lent.ready[kind], lent.ids[kind].size);
    return ready;
  }

  /** `borrower` is gone (its slots are released with every other it held). */
  forget(borrower: Borrower): void {
    this.#lent.delete(borrower);
  }

  #of(borrower: Borrower): Lent {
    let lent = this.#lent.get(borrower);
    if (lent === undefined) {
      lent = {
        ids: { download: new Set(), upload: new Set() },
        recalled: { download: false, upload: false },
        ready: { download: 0, upload: 0 },
      };
      this.#lent.set(borrower, lent);
    }
    return lent;
  }
}
