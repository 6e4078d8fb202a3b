import { Histogram, Registry, type RegistryContentType } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { TalliedHistogram } from './tallied-histogram.ts';

const BUCKETS = [0.001, 0.01, 0.1, 1, 10];
const OBSERVED: Array<[Record<string, string>, number]> = [
  [{ method: 'GET', status: '200' }, 0.0005],
  [{ method: 'GET', status: '200' }, 0.001], // on a bound: counted in that bucket (le)
  [{ method: 'GET', status: '200' }, 0.05],
  [{ method: 'PUT', status: '201' }, 3],
  [{ method: 'PUT', status: '201' }, 99], // above every bound: +Inf only
  [{ method: 'GET', status: '404' }, 0],
];

describe('TalliedHistogram', () => {
  it("renders exactly what prom-client's Histogram renders for the same observations, in both formats", async () => {
    for (const contentType of [Registry.PROMETHEUS_CONTENT_TYPE, Registry.OPENMETRICS_CONTENT_TYPE] as const) {
      const ours = new Registry<RegistryContentType>();
      const theirs = new Registry<RegistryContentType>();
      ours.setContentType(contentType);
      theirs.setContentType(contentType);
      const tallied = new TalliedHistogram({ name: 'h_seconds', help: 'Help.', buckets: BUCKETS, registry: ours });
      const reference = new Histogram({
        name: 'h_seconds',
        help: 'Help.',
        labelNames: ['method', 'status'],
        buckets: BUCKETS,
        registers: [theirs],
      });
      const series = new Map<string, ReturnType<TalliedHistogram['series']>>();
      for (const [labels, value] of OBSERVED) {
        const key = JSON.stringify(labels);
        if (!series.has(key)) series.set(key, tallied.series(labels));
        series.get(key)!.observe(value);
        reference.observe(labels, value);
      }
      expect(await ours.metrics()).toBe(await theirs.metrics());
      ours.resetMetrics();
      expect(await ours.metrics()).toContain('h_seconds_count{method="GET",status="200"} 0');
      series.get(JSON.stringify(OBSERVED[0]![0]))!.observe(0.2);
      expect(await ours.metrics()).toContain('h_seconds_bucket{le="1",method="GET",status="200"} 1');
    }
  });
});
