/** `arkvory_admission_*`: the admission queue's slots, waiters and refusals, read at scrape time. */
import type { Registry } from 'prom-client';
import type { AdmissionSnapshot } from '../../policy/admission/index.ts';
import { counter, gauge } from './families.ts';

/** Registers the admission families of `admission` (one queue per process). */
export function registerAdmissionMetrics(
  registry: Registry,
  admission: { snapshot(): AdmissionSnapshot },
  /** Slots lent to workers and held unused, by kind (proxy/workers/slot-lending.ts); none without workers. */
  lentReady: (kind: 'download' | 'upload') => number = () => 0,
): void {
  const byKind = () => {
    const a = admission.snapshot();
    return [
      ['download', a.downloads],
      ['upload', a.uploads],
    ] as const;
  };
  gauge(registry, 'arkvory_admission_active', function () {
    for (const [kind, c] of byKind()) this.set({ kind }, c.active);
  });
  gauge(registry, 'arkvory_admission_queued', function () {
    for (const [kind, c] of byKind()) this.set({ kind }, c.queued);
  });
  gauge(registry, 'arkvory_admission_lent_ready', function () {
    for (const kind of ['download', 'upload'] as const) this.set({ kind }, lentReady(kind));
  });
  counter(registry, 'arkvory_admission_rejected_total', function () {
    this.reset();
    for (const [kind, c] of byKind()) this.inc({ kind }, c.rejected);
  });
}
