/** `arkvory_store_*`: the store's health state read at scrape time; failures counted as they happen. */
import type { Registry } from 'prom-client';
import { STORE_STATES, type StoreHealth } from '../store-health/store-health.ts';
import { counter, gauge } from './families.ts';

/** Registers the store-health families and counts `health`'s failures. */
export function registerStoreHealthMetrics(registry: Registry, health: StoreHealth): void {
  gauge(registry, 'arkvory_store_state', function () {
    const current = health.state;
    for (const state of STORE_STATES) this.set({ state }, state === current ? 1 : 0);
  });
  const failures = counter(registry, 'arkvory_store_failures_total');
  failures.inc({ source: 'probe' }, 0);
  failures.inc({ source: 'request' }, 0);
  health.onFailure((source) => failures.inc({ source }));
}
