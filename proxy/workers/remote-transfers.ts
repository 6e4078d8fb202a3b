/**
 * A worker's Transfers: admission, a repository's transfer bound and every paced quantum are asked
 * of the coordinating process (policy-host.ts), so the bounds are the instance's. What needs no
 * shared state stays here: with both ceilings of a direction off and no group or repository
 * ceiling, a stream's takes pass at once on this worker's own governor (nothing to share; it still
 * counts the bytes for /metrics) — except in the shared profile, where only the coordinating process
 * knows whether the slot lease still permits a grant: a worker knows only what it was told, so one
 * beside a coordinating process that stands still would grant upload quanta long after the permit
 * lapsed. There every take is the coordinating process's, watched like a paced one.
 *
 * A coordinating process that does not answer (stopped, stuck in a long synchronous task) must not
 * hold a worker's requests without bound: an admission waits at most the instance's own wait bound
 * plus `ADMISSION_DEADLINE_MARGIN_MS`, and a repository's transfer, answered at once there, at most
 * `HOLD_DEADLINE_MS`; either is then 503 `unavailable`, and what is granted after that goes back at
 * once. A paced take has no deadline of its own: a healthy governor may hold it as long as its
 * ceilings say, and the idle timeouts leave a stream whose take waits be (front-door/pacing.ts). So
 * while takes wait, the worker checks that the coordinating process answers (take-watch.ts): one
 * silent for `TAKE_CHECK_DEADLINE_MS` fails each waiting take with `unavailable` (its stream 503
 * before the head, cut after it), at most `TAKE_CHECK_INTERVAL_MS` + `TAKE_CHECK_DEADLINE_MS` after
 * it stood still; `unanswered` counts them. A quantum it grants as the worker gives up stays spent
 * (a bucket never refunds): at most one per stream, which errs on the slow side.
 */
import type { Release, TransferKind } from '../../policy/admission/index.ts';
import {
  type BandwidthGovernors,
  type BandwidthSnapshot,
  type ByteMeter,
  quantumBytesFor,
} from '../../policy/bandwidth/index.ts';
import type { Clock } from '../../policy/clock.ts';
import { PolicyError } from '../../policy/errors.ts';
import { systemTimers, type Timers } from '../../policy/timers.ts';
import type { Config } from '../config/config.ts';
import { createTransfers, governorCeilings, type Transfers, transfersReadiness } from '../gates/transfers.ts';
import type { LeaseStanding } from '../../policy/lease/coordinator.ts';
import { askInstance } from './instance-reads.ts';
import type { Link } from './link.ts';
import type { AdmitAnswer, AdmitRequest, HoldRequest, PolicySnapshot, TakeRequest } from './policy-host.ts';
import { ReadySlots } from './ready-slots.ts';
import { READY, RECALL } from './slot-lending.ts';
import { TakeWatch } from './take-watch.ts';

export interface RemoteTransfers extends Transfers {
  /** This worker's own governors: the unlimited streams' counts, for the instance's /metrics sum. */
  readonly local: BandwidthGovernors;
  /**
   * Reads the coordinating process's snapshot (what `governors`, `admission` and `snapshot()` show);
   * `unavailable` past `READ_DEADLINE_MS` (instance-reads.ts), the last one read staying shown.
   */
  refresh(): Promise<void>;
  /** Takes failed, by direction, because the coordinating process stopped answering while they waited (take-watch.ts). */
  readonly unanswered: Readonly<Record<'download' | 'upload', number>>;
}

/**
 * How much longer than ARKVORY_ADMISSION_WAIT_SECONDS a worker waits for its admission: the way there
 * and back and a busy event loop on each side, so a healthy instance's own answer (a slot, or 429
 * `busy` at its wait bound) comes first. Below one second, the least an idle timeout must exceed that
 * wait by, so the request is answered rather than cut.
 */
export const ADMISSION_DEADLINE_MARGIN_MS = 500;

/** How long a worker waits for a repository's transfer, which the coordinating process answers at once. */
export const HOLD_DEADLINE_MS = 2000;

export function createRemoteTransfers(
  config: Config,
  clock: Clock,
  standing: LeaseStanding,
  link: Link,
  timers: Timers = systemTimers,
  /** Told once per silence of the coordinating process how many waiting takes it failed. */
  onSilent?: (takes: number) => void,
): RemoteTransfers {
  // Everything a Transfers does that needs no shared state (ceilings, the live list) is the local
  // implementation's; its admission queue and repository bounds are never used.
  const base = createTransfers(config, clock, standing);
  const local = base.governors;
  const limits = governorCeilings(config);
  // Passing at once here needs no lease to check: standalone, where the permit ends only when the
  // instance is fenced, which the worker is told of.
  const standalone = !config.shared;
  const unlimited = {
    download: standalone && limits.downloadBytesPerSec === 0 && limits.downloadBytesPerSecPerPrincipal === 0,
    upload: standalone && limits.uploadBytesPerSec === 0 && limits.uploadBytesPerSecPerPrincipal === 0,
  };
  let latest: PolicySnapshot = {
    admission: base.admission.snapshot(),
    download: local.download.snapshot(),
    upload: local.upload.snapshot(),
  };
  let closed = false;
  const waits = new Set<AbortController>();
  const watch = new TakeWatch(link, timers, onSilent);
  const unansweredTakes = { download: 0, upload: 0 };
  const release = (id: number, op = 'release'): Release => {
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      link.note(op, id);
    };
  };
  // Slots the coordinating process lent beside an admission (slot-lending.ts): admitted here, no call.
  const ready = new ReadySlots({
    giveBack: (id) => link.note('release', id),
    report: (counts) => link.note(READY, counts),
    timers,
  });
  link.handle(RECALL, (kind) => {
    if (kind !== 'download' && kind !== 'upload') return;
    // After the microtasks already queued: an answer lending slots, read in the same batch just
    // before this recall, adds them in its admission's continuation; they go back with the rest.
    queueMicrotask(() => ready.recall(kind));
  });
  standing.onFenced(() => ready.close());
  const giveBack = (answer: AdmitAnswer) => {
    if (typeof answer === 'number') link.note('release', answer);
    else for (const id of [answer.id, ...answer.lent]) link.note('release', id);
  };
  const tryReady = (principalId: string, kind: TransferKind): Release | undefined => {
    if (closed || !standing.isPermitted()) return undefined;
    const id = ready.take(principalId, kind);
    if (id === undefined) return undefined;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      ready.put(principalId, kind, id);
    };
  };
  return {
    ...base,
    local,
    unanswered: unansweredTakes,
    governors: {
      download: { snapshot: (): BandwidthSnapshot => latest.download },
      upload: { snapshot: (): BandwidthSnapshot => latest.upload },
    },
    admission: { snapshot: () => latest.admission },
    async refresh() {
      latest = await askInstance<PolicySnapshot>(link, 'snapshot', timers);
    },
    async admit(principalId: string, kind: TransferKind, signal?: AbortSignal) {
      if (closed) throw new PolicyError('unavailable');
      const now = tryReady(principalId, kind);
      if (now) return now;
      const request: AdmitRequest = { principalId, kind };
      // Closing this worker refuses its waiting requests, like a process's own queue does.
      const waiting = new AbortController();
      const onAbort = () => waiting.abort(signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      waits.add(waiting);
      const deadline = timers.setTimeout(
        () => waiting.abort(unanswered('admission')),
        config.admission.waitMs + ADMISSION_DEADLINE_MARGIN_MS,
      );
      try {
        // A slot granted while this request gave up is handed back at once, with any lent beside it.
        const answer = await link.call<AdmitAnswer>('admit', request, waiting.signal, giveBack);
        if (typeof answer === 'number') return release(answer);
        ready.add(principalId, kind, answer.lent);
        return release(answer.id);
      } finally {
        timers.clearTimeout(deadline);
        waits.delete(waiting);
        signal?.removeEventListener('abort', onAbort);
      }
    },
    tryAdmit(principalId: string, kind: TransferKind) {
      return tryReady(principalId, kind);
    },
    async holdRepository(repository, max) {
      if (closed) throw new PolicyError('unavailable');
      // Answered at once (granted or busy): a longer silence is a coordinating process that cannot answer.
      const request: HoldRequest = { repository, max };
      const waiting = new AbortController();
      const deadline = timers.setTimeout(() => waiting.abort(unanswered('repository transfer')), HOLD_DEADLINE_MS);
      try {
        const id = await link.call<number>('repository.hold', request, waiting.signal, (late) =>
          link.note('repository.release', late),
        );
        return release(id, 'repository.release');
      } finally {
        timers.clearTimeout(deadline);
      }
    },
    meter(direction, principalId, weight = 1, ceilings = []): ByteMeter {
      if (unlimited[direction] && ceilings.length === 0) return local[direction].meter(principalId, weight);
      const quantumBytes = Math.min(
        local[direction].quantumBytes,
        quantumBytesFor(ceilings.map((c) => c.rateBytesPerSec)),
      );
      const list = [...ceilings];
      // The coordinating process makes a meter per take: only the first one sets the weight, so a
      // stream begun before a weight change does not set the old weight again on each take, and each
      // carries the stream's place in its principal's fair order (what the previous take answered),
      // so a small response goes before a big transfer's next quantum as on a gateway of one process.
      let opens = true;
      let tag = 0;
      // A take is asked of the coordinating process: until it answers, the stream waits on the gateway.
      let waiting = false;
      return {
        quantumBytes,
        async take(bytes, signal) {
          const request: TakeRequest = { direction, principalId, weight, ceilings: list, bytes, opens, tag };
          opens = false;
          waiting = true;
          const watched = watch.watch();
          try {
            tag = await link.call<number>(
              'take',
              request,
              signal ? AbortSignal.any([signal, watched.signal]) : watched.signal,
            );
          } catch (err) {
            if (watched.signal.aborted && err === watched.signal.reason) unansweredTakes[direction]++;
            throw err;
          } finally {
            watched.done();
            waiting = false;
          }
        },
        tryTake: () => false,
        get waiting() {
          return waiting;
        },
      };
    },
    snapshot() {
      return transfersReadiness(latest.admission, latest.download, latest.upload);
    },
    close() {
      closed = true;
      ready.close();
      watch.close();
      for (const waiting of waits) waiting.abort(new PolicyError('unavailable'));
      base.close();
    },
  };
}

/** A call the coordinating process did not answer in time: retryable, like a closed queue's. */
function unanswered(what: string): PolicyError {
  return new PolicyError('unavailable', `The instance's ${what} state did not answer in time; retry shortly.`, {
    headers: { 'retry-after': '1' },
  });
}
