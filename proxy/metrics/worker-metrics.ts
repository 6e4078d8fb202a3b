/**
 * `arkvory_workers`, `arkvory_worker_restarts_total` and `arkvory_workers_unanswered`: the processes
 * serving this instance.
 */
import type { Registry } from 'prom-client';
import { counter, gauge } from './families.ts';

const STATES = ['starting', 'serving', 'draining', 'fenced'] as const;
export type WorkerState = (typeof STATES)[number];

/**
 * Registers the worker families: `states` lists each worker's state now (a gateway of one process
 * is its own one worker), `restarts` how many were replaced since start, `unanswered` how many
 * workers' families the scrape being made lacks.
 */
export function registerWorkerMetrics(
  registry: Registry,
  states: () => readonly WorkerState[],
  restarts: () => number,
  unanswered: () => number,
): void {
  gauge(registry, 'arkvory_workers', function () {
    const now = states();
    for (const state of STATES) this.set({ state }, now.filter((s) => s === state).length);
  });
  counter(registry, 'arkvory_worker_restarts_total', function () {
    this.reset();
    this.inc(restarts());
  });
  gauge(registry, 'arkvory_workers_unanswered', function () {
    this.set(unanswered());
  });
}
