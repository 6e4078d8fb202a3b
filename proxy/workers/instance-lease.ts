/**
 * A worker's standing (proxy/workers/): the barriers and the slot lease of the shared profile are
 * its instance's, held by the coordinating process (policy-host.ts serves them). The worker is
 * fenced when the instance is (told at once) or when its own connection, which holds its
 * maintenance barrier, fails. Fenced alone, while its instance serves, it cannot serve again but a
 * new worker can: it leaves (`onFencedAlone`) and its coordinating process starts another.
 */
import type { LeaseStanding, SharedDownloads } from '../../policy/lease/coordinator.ts';
import { systemTimers, type Timers } from '../../policy/timers.ts';
import { askInstance } from './instance-reads.ts';
import type { Link } from './link.ts';
import { askAtStart } from './start-calls.ts';

/** The instance's lease as the coordinating process answers `lease`. */
export interface LeaseView {
  owner: string;
  fencedReason: string | undefined;
  sharedDownloads: SharedDownloads | null;
}

export interface InstanceLease extends LeaseStanding {
  /** Reads the instance's lease again (what `snapshot()` shows); `unavailable` past `READ_DEADLINE_MS`. */
  refresh(): Promise<void>;
  /** Its own connection failed while the instance was not fenced: this worker alone is. */
  onFencedAlone(listener: (reason: string) => void): void;
}

export async function joinInstanceLease(
  link: Link,
  own: LeaseStanding,
  timers: Timers = systemTimers,
): Promise<InstanceLease> {
  // At the worker's start: a coordinating process that does not answer fails it (start-calls.ts).
  let view = await askAtStart<LeaseView>(link, 'lease', timers);
  let instanceFenced = view.fencedReason;
  const listeners: Array<(reason: string) => void> = [];
  let told = false;
  const fenced = (reason: string) => {
    if (told) return;
    told = true;
    for (const listener of listeners) listener(reason);
  };
  link.handle('lease.fenced', (reason) => {
    instanceFenced ??= reason as string;
    fenced(instanceFenced);
  });
  own.onFenced(fenced);
  const alone: Array<(reason: string) => void> = [];
  own.onFenced((reason) => {
    if (instanceFenced === undefined) for (const listener of alone) listener(reason);
  });
  const fencedReason = () => instanceFenced ?? own.fencedReason;
  return {
    owner: view.owner,
    get fencedReason() {
      return fencedReason();
    },
    // Every grant of a limited stream, and in the shared profile of every stream, is the coordinating
    // process's, which checks the lease itself; this worker's own governors (standalone streams no
    // ceiling applies to, whose permit ends only with a fence it is told of) stop once it is fenced.
    isPermitted: () => fencedReason() === undefined,
    onFenced(listener) {
      listeners.push(listener);
      const reason = fencedReason();
      if (reason !== undefined) listener(reason);
    },
    snapshot() {
      const shared = view.sharedDownloads;
      return shared && { ...shared, active: shared.active && fencedReason() === undefined };
    },
    onFencedAlone(listener) {
      alone.push(listener);
    },
    async refresh() {
      view = await askInstance<LeaseView>(link, 'lease', timers);
      instanceFenced ??= view.fencedReason;
      if (instanceFenced !== undefined) fenced(instanceFenced);
    },
  };
}
