/** `arkvory_lease_*`: the lease state read at scrape time; renewals and fencing as they happen. */
import { Histogram, type Registry } from 'prom-client';
import type { Coordinator, RenewalOutcome } from '../../policy/lease/coordinator.ts';
import { RENEWAL_SECONDS_BUCKETS, specOf } from './catalogue.ts';
import { counter, gauge } from './families.ts';

const LEASE_STATES = ['standalone', 'held', 'lapsed', 'fenced'] as const;

/** Registers the lease families and subscribes to `coordinator`'s renewals and fencing. */
export function registerLeaseMetrics(registry: Registry, coordinator: Coordinator): void {
  gauge(registry, 'arkvory_lease_state', function () {
    const current =
      coordinator.fencedReason !== undefined
        ? 'fenced'
        : coordinator.snapshot() === null
          ? 'standalone'
          : coordinator.isPermitted()
            ? 'held'
            : coordinator.fencedReason !== undefined
              ? 'fenced'
              : 'lapsed';
    for (const state of LEASE_STATES) this.set({ state }, state === current ? 1 : 0);
  });
  const renewals = counter(registry, 'arkvory_lease_renewals_total');
  for (const outcome of ['confirmed', 'rejected', 'failed'] satisfies RenewalOutcome[]) renewals.inc({ outcome }, 0);
  const renewalSpec = specOf('arkvory_lease_renewal_duration_seconds');
  const renewalSeconds = new Histogram({
    name: renewalSpec.name,
    help: renewalSpec.help,
    buckets: [...RENEWAL_SECONDS_BUCKETS],
    registers: [registry],
  });
  const fencing = counter(registry, 'arkvory_lease_fencing_events_total');
  fencing.inc(0);
  coordinator.onRenewal((outcome, seconds) => {
    renewals.inc({ outcome });
    renewalSeconds.observe(seconds);
  });
  coordinator.onFenced(() => fencing.inc());
}
