/**
 * Keeps the instance's counters and histograms from going back in its summed /metrics. The sum
 * adds up the processes that answer: a worker that died (its replacement counts from 0) or that did
 * not answer this scrape in time would take its share out, and a counter that drops is read by
 * Prometheus as a reset, so `rate()` and `increase()` would count the whole remainder again. So the
 * coordinating process keeps each worker's cumulative families as it last read them: a worker that
 * did not answer is summed as it last stood, and a worker that is gone stays in the sum for good as
 * it last stood (its increments since that read were never shown, so nothing goes back). What is
 * kept for the gone ones is merged into one set of series, so a crash loop does not grow it.
 */
import { type Family, NOT_SUMMED } from './instance-metrics.ts';

/** Families whose values only grow while their process lives. */
const CUMULATIVE = new Set(['counter', 'histogram']);

function cumulative(families: readonly Family[]): Family[] {
  return structuredClone(families.filter((f) => f.type !== undefined && CUMULATIVE.has(String(f.type))));
}

type Value = Family['values'][number];

function seriesKey(v: Value): string {
  const labels = Object.keys(v.labels)
    .sort()
    .map((k) => [k, v.labels[k]]);
  return JSON.stringify([v.metricName ?? '', labels]);
}

/** `into` and `from` merged by series: summed, or the larger where the instance shows one value. */
function merge(into: readonly Family[], from: readonly Family[]): Family[] {
  const byName = new Map(structuredClone(into).map((f) => [f.name, f]));
  for (const family of from) {
    const kept = byName.get(family.name);
    if (!kept) {
      byName.set(family.name, structuredClone(family));
      continue;
    }
    const max = NOT_SUMMED[family.name] === 'max';
    const values = new Map(kept.values.map((v) => [seriesKey(v), v]));
    for (const v of family.values) {
      const key = seriesKey(v);
      const old = values.get(key);
      if (!old) values.set(key, structuredClone(v));
      else old.value = max ? Math.max(old.value, v.value) : old.value + v.value;
    }
    kept.values = [...values.values()];
  }
  return [...byName.values()];
}

export class CarriedTotals<K> {
  readonly #last = new Map<K, Family[]>();
  #retired: Family[] = [];

  /** `key` answered a scrape with `families`: its cumulative ones are kept as they stand. */
  answered(key: K, families: readonly Family[]): void {
    this.#last.set(key, cumulative(families));
  }

  /** What stands in the sum for `key`, which did not answer: its cumulative families as last read. */
  lastOf(key: K): Family[] | undefined {
    const last = this.#last.get(key);
    return last && structuredClone(last);
  }

  /** `key` is gone: its cumulative families as last read stay in every later sum. */
  retire(key: K): void {
    const last = this.#last.get(key);
    this.#last.delete(key);
    if (last) this.#retired = merge(this.#retired, last);
  }

  /** The gone processes' share of the sum (empty when none had answered). */
  retired(): Family[] {
    return structuredClone(this.#retired);
  }
}
