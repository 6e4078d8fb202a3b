/**
 * Preloaded into a server a benchmark measures (`node --import bench/gc-totals.ts`): keeps the
 * process's garbage-collection totals (count and pause time, minor and major) in
 * `$BENCH_GC_TOTALS_DIR/<pid>.json`, rewritten every 100 ms, so the benchmark can read how much
 * of a run went to the collector in each of a gateway's processes (its workers inherit the
 * preload through NODE_OPTIONS). Pause time is the main thread's: V8's helper threads work beside
 * it when a core is free.
 */
import { rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { constants, type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';

export interface GcTotals {
  minorCount: number;
  minorMs: number;
  majorCount: number;
  majorMs: number;
}

const dir = process.env.BENCH_GC_TOTALS_DIR;
if (dir) {
  const totals: GcTotals = { minorCount: 0, minorMs: 0, majorCount: 0, majorMs: 0 };
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const { kind } = (entry as PerformanceEntry & { detail: { kind: number } }).detail;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) {
        totals.minorCount++;
        totals.minorMs += entry.duration;
      } else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        totals.majorCount++;
        totals.majorMs += entry.duration;
      }
    }
  }).observe({ entryTypes: ['gc'] });
  const file = path.join(dir, `${process.pid}.json`);
  // Written aside and renamed over: the bench reads the file at any moment and must never see it half
  // written. Asynchronously and only when the totals changed: synchronous writes and renames every
  // 100 ms took about 2 % of a measured server's main thread (a rename took about 1 ms here).
  let written = '';
  let writing = false;
  setInterval(() => {
    const text = JSON.stringify(totals);
    if (writing || text === written) return;
    writing = true;
    writeFile(`${file}.tmp`, text)
      .then(() => rename(`${file}.tmp`, file))
      .then(
        () => {
          written = text;
        },
        () => {},
      )
      .finally(() => {
        writing = false;
      });
  }, 100).unref();
}
