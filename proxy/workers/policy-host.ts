/**
 * The instance's policy state, owned by the coordinating process and used by every worker over its
 * link (docs/architecture.md, "Workers"): the admission queue, the two bandwidth governors, the
 * repositories' bounds on concurrent transfers, the lease (shared profile) and, with no Redis, the
 * rate-limit counters and bans. One set of each, so every bound is the instance's and exact by
 * construction: a worker holds an admission slot or a repository's transfer only while the
 * coordinating process counts it, and passes a quantum only after the governor granted it. When a
 * worker is gone its slots and repository transfers are released and its waiting takes and
 * admissions cancelled, in the same turn of the event loop that learns of its exit.
 */
import type { AdmissionQueue, AdmissionSnapshot, Release } from '../../policy/admission/index.ts';
import type { BandwidthGovernors, BandwidthSnapshot } from '../../policy/bandwidth/index.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import type { CounterStore } from '../../policy/rate-limit/index.ts';
import { RepositoryHolds } from '../gates/transfers.ts';
import {
  CallChecks,
  type MalformedCallLog,
  parseAdmit,
  parseCountersClear,
  parseCountersRun,
  parseHeldId,
  parseHold,
  parseReady,
  parseTake,
} from './call-args.ts';
import type { LeaseView } from './instance-lease.ts';
import type { Link } from './link.ts';
import { READY, SlotLending } from './slot-lending.ts';

export type { AdmitAnswer, AdmitRequest, HoldRequest, TakeRequest } from './call-args.ts';

export interface PolicySnapshot {
  admission: AdmissionSnapshot;
  download: BandwidthSnapshot;
  upload: BandwidthSnapshot;
}

export class PolicyHost {
  readonly #admission: AdmissionQueue;
  readonly #governors: BandwidthGovernors;
  readonly #counters: CounterStore | undefined;
  readonly #lease: LeaseStanding;
  /** Every call's arguments are checked before they touch the shared state (call-args.ts). */
  readonly #checks: CallChecks;
  /** Admission slots by worker, each by the id the worker releases it with. */
  readonly #slots = new Map<Link, Map<number, Release>>();
  readonly #repositories = new RepositoryHolds();
  /** Repository transfer holds by worker, each by the id the worker releases it with. */
  readonly #holds = new Map<Link, Map<number, Release>>();
  /** The next id of a slot or hold (one sequence: each kind is released by its own op). */
  #nextId = 1;
  /** Slots lent to workers beside the ones they ask for (slot-lending.ts), when lending is on. */
  readonly #lending: SlotLending | undefined;

  constructor(deps: {
    admission: AdmissionQueue;
    governors: BandwidthGovernors;
    lease: LeaseStanding;
    counters?: CounterStore;
    log?: MalformedCallLog;
    /** Shared with the instance's other call handlers (the console's sessions), so each reports once. */
    checks?: CallChecks;
    /** Lend admission slots to this many workers (slot-lending.ts); without it, none is lent. */
    lendTo?: number;
  }) {
    this.#checks = deps.checks ?? new CallChecks(deps.log);
    this.#admission = deps.admission;
    this.#governors = deps.governors;
    this.#counters = deps.counters;
    this.#lease = deps.lease;
    this.#lending = deps.lendTo === undefined ? undefined : new SlotLending(deps.admission, deps.lendTo);
    // Every worker stops serving with the instance (a worker that starts later reads it in `lease`),
    // and the requests waiting for a slot are refused now rather than admitted to a fenced instance.
    this.#lease.onFenced((reason) => {
      this.#admission.fence();
      for (const link of this.#slots.keys()) link.note('lease.fenced', reason);
    });
  }

  /** Serves one worker's calls on its link. */
  attach(link: Link): void {
    const parse = <T>(op: string, parser: () => T): T => this.#checks.parse(link, op, parser);
    this.#serveAdmission(link, parse);
    link.handle(
      'lease',
      (): LeaseView => ({
        owner: this.#lease.owner,
        fencedReason: this.#lease.fencedReason,
        sharedDownloads: this.#lease.snapshot(),
      }),
    );
    this.#serveHeld(link, this.#holds, 'repository.hold', 'repository.release', (args, _signal, hold) => {
      const { repository, max } = parse('repository.hold', () => parseHold(args));
      return hold(this.#repositories.hold(repository, max));
    });
    link.handle('take', (args, signal) => {
      // The governor holds each take to its meter's quantum, at most the direction's; this bounds it first.
      const most = Math.max(this.#governors.download.quantumBytes, this.#governors.upload.quantumBytes);
      const t = parse('take', () => parseTake(args, most));
      // A meter per take, carrying its stream's place in fair order; the answer is the new place.
      const meter = this.#governors[t.direction].meter(t.principalId, t.weight, t.ceilings, {
        opens: t.opens,
        tag: t.tag,
      });
      return meter.tryTake(t.bytes) ? meter.streamTag() : meter.take(t.bytes, signal).then(() => meter.streamTag());
    });
    link.handle('snapshot', (): PolicySnapshot => this.snapshot());
    const counters = this.#counters;
    if (counters) {
      link.handle('counters.run', (args) => counters.run(...parse('counters.run', () => parseCountersRun(args))));
      link.handle('counters.clear', (args) => counters.clear(parse('counters.clear', () => parseCountersClear(args))));
    }
  }

  /**
   * Serves `admit` and `release` (`#serveHeld`); an admission's answer is its slot's id, or
   * `AdmitAnswer` when slots are lent with it. With lending, also the worker's report of the lent
   * slots it holds unused.
   */
  #serveAdmission(link: Link, parse: <T>(op: string, parser: () => T) => T): void {
    const lending = this.#lending;
    this.#serveHeld(
      link,
      this.#slots,
      'admit',
      'release',
      async (args, signal, hold) => {
        const { principalId, kind } = parse('admit', () => parseAdmit(args));
        if (!this.#lease.isPermitted()) throw new PolicyError('lease_lost');
        if (lending === undefined) return hold(await this.#admission.acquire(principalId, kind, signal));
        let release = this.#admission.tryAcquire(principalId, kind);
        if (release === undefined) {
          // Not at once: the slots workers hold unused go back, and this request waits its turn for one.
          lending.recall(kind);
          release = await this.#admission.acquire(principalId, kind, signal);
        }
        const id = hold(release);
        const lent = lending.lend(link, principalId, kind, hold);
        return lent.length === 0 ? id : { id, lent };
      },
      lending && ((id) => lending.released(link, id)),
    );
    if (lending)
      link.handle(READY, (args) =>
        lending.reported(
          link,
          parse(READY, () => parseReady(args)),
        ),
      );
  }

  /**
   * Serves `op`, whose handler keeps what it acquires for `link` in `byLink` through `hold`, which
   * gives the id its answer names, and `releaseOp`, which releases one id (once; an unknown id is a
   * no-op) and tells `released`.
   */
  #serveHeld(
    link: Link,
    byLink: Map<Link, Map<number, Release>>,
    op: string,
    releaseOp: string,
    answer: (args: unknown, signal: AbortSignal, hold: (release: Release) => number) => unknown,
    released?: (id: number) => void,
  ): void {
    const held = new Map<number, Release>();
    byLink.set(link, held);
    const hold = (release: Release): number => {
      const id = this.#nextId++;
      held.set(id, release);
      return id;
    };
    link.handle(op, async (args, signal) => answer(args, signal, hold));
    link.handle(releaseOp, (args) => {
      const id = this.#checks.parse(link, releaseOp, () => parseHeldId(releaseOp, args));
      held.get(id)?.();
      held.delete(id);
      released?.(id);
    });
  }

  /**
   * A worker is gone: its calls in progress are cancelled (a waiting take or admission leaves its
   * queue, granting nothing) and every slot and repository transfer it held is released.
   */
  detach(link: Link): void {
    link.close();
    this.#lending?.forget(link);
    const slots = this.#slots.get(link);
    this.#slots.delete(link);
    for (const release of slots?.values() ?? []) release();
    const holds = this.#holds.get(link);
    this.#holds.delete(link);
    for (const release of holds?.values() ?? []) release();
  }

  /** Slots held by live workers (what the admission queue counts active). */
  get heldSlots(): number {
    let held = 0;
    for (const slots of this.#slots.values()) held += slots.size;
    return held;
  }

  /** Slots lent to workers that they hold unused (slot-lending.ts), by kind. */
  lentReady(kind: 'download' | 'upload'): number {
    return this.#lending?.ready(kind) ?? 0;
  }

  snapshot(): PolicySnapshot {
    const admission = this.#admission.snapshot();
    const lending = this.#lending;
    return {
      // Lent slots a worker holds unused are no transfers.
      admission: lending
        ? {
            ...admission,
            downloads: { ...admission.downloads, active: admission.downloads.active - lending.ready('download') },
            uploads: { ...admission.uploads, active: admission.uploads.active - lending.ready('upload') },
          }
        : admission,
      download: this.#governors.download.snapshot(),
      upload: this.#governors.upload.snapshot(),
    };
  }

  close(): void {
    this.#admission.close();
    this.#governors.download.close();
    this.#governors.upload.close();
  }
}
