/**
 * A Prometheus histogram for the per-request hot path: each label set is a `Series` the caller keeps
 * (plain counters in an array), and the registry renders every series from `get()` at scrape time,
 * exactly as it renders prom-client's own Histogram (`_bucket` with cumulative `le` counts and
 * `+Inf`, `_sum`, `_count`).
 *
 * Why not prom-client's Histogram: its observe() builds, validates and hashes a label object on
 * every call, on the hot path of every request, and it has no way to take counts in bulk at
 * collect time, so a tally in front of it (as the counters have) cannot help.
 */
import type { Metric, Registry, RegistryContentType } from 'prom-client';

export interface Series {
  observe(value: number): void;
}

interface SeriesState {
  readonly labels: Readonly<Record<string, string>>;
  /** Observations per bucket, not cumulative; the last slot is above every bound (+Inf). */
  readonly counts: Float64Array;
  sum: number;
  count: number;
}

export class TalliedHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #bounds: readonly number[];
  readonly #series: SeriesState[] = [];

  constructor(options: {
    name: string;
    help: string;
    buckets: readonly number[];
    registry: Registry<RegistryContentType>;
  }) {
    this.name = options.name;
    this.help = options.help;
    this.#bounds = [...options.buckets].sort((a, b) => a - b);
    // The registry needs only name, help, type, get() and reset(): the shape prom-client's own
    // metrics have, which its Metric type does not spell out for a class outside the library.
    options.registry.registerMetric(this as unknown as Metric);
  }

  /** A new label set; the caller keeps the handle (label sets are bounded by the caller). */
  series(labels: Readonly<Record<string, string>>): Series {
    const state: SeriesState = { labels, counts: new Float64Array(this.#bounds.length + 1), sum: 0, count: 0 };
    this.#series.push(state);
    const bounds = this.#bounds;
    return {
      observe(value) {
        let i = 0;
        while (i < bounds.length && value > bounds[i]!) i++;
        state.counts[i]!++;
        state.sum += value;
        state.count++;
      },
    };
  }

  async get() {
    const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
    for (const s of this.#series) {
      let cumulative = 0;
      this.#bounds.forEach((le, i) => {
        cumulative += s.counts[i]!;
        values.push({ labels: { le, ...s.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${this.name}_bucket` });
      values.push({ labels: { ...s.labels }, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: { ...s.labels }, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** Zeroes every series (the handles stay valid), as prom-client's reset() does for its own. */
  reset(): void {
    for (const s of this.#series) {
      s.counts.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }
}
