/**
 * The instance's counters and histograms across workers that are left out of a sum or die: each is
 * summed as it last stood, a gone one for good, merged with the others gone so a crash loop keeps
 * one set of series.
 */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { counter, gauge } from '../metrics/families.ts';
import { CarriedTotals } from './carried-totals.ts';
import { type Family, sumInstance } from './instance-metrics.ts';

/** A worker's families: `requests` counted, `open` connections, `reloads` failed (shown once, not summed). */
async function worker(requests: number, open = 1, reloads = 0): Promise<Family[]> {
  const registry = new Registry();
  counter(registry, 'arkvory_http_requests_total').inc({ method: 'GET', route: '/r', status: '200' }, requests);
  counter(registry, 'arkvory_tls_reload_failures_total').inc(reloads);
  gauge(registry, 'arkvory_workers', function () {
    this.set({ state: 'serving' }, open);
  });
  return (await registry.getMetricsAsJSON()) as unknown as Family[];
}

async function shown(lists: Family[][], name: string): Promise<string[]> {
  const text = await sumInstance(lists).body;
  return text.split('\n').filter((l) => l.startsWith(name));
}

describe('CarriedTotals', () => {
  it('a worker that did not answer is summed as it last stood, its gauges left out', async () => {
    const totals = new CarriedTotals<string>();
    totals.answered('b', await worker(7, 3));
    const lists = [await worker(5, 2), totals.lastOf('b')!];
    expect(await shown(lists, 'arkvory_http_requests_total')).toEqual([
      'arkvory_http_requests_total{method="GET",route="/r",status="200"} 12',
    ]);
    expect(await shown(lists, 'arkvory_workers')).toEqual(['arkvory_workers{state="serving"} 2']);
  });

  it('a gone worker stays in every later sum, merged with the others gone', async () => {
    const totals = new CarriedTotals<string>();
    totals.answered('b', await worker(7, 1, 2));
    totals.retire('b');
    expect(totals.lastOf('b')).toBeUndefined();
    // Its replacement counts from 0, and dies too (a crash loop).
    totals.answered('b2', await worker(4, 1, 2));
    totals.retire('b2');
    const retired = totals.retired();
    expect(retired.find((f) => f.name === 'arkvory_http_requests_total')!.values).toHaveLength(1);
    const lists = [await worker(5, 1, 2), await worker(1, 1, 2), retired];
    expect(await shown(lists, 'arkvory_http_requests_total')).toEqual([
      'arkvory_http_requests_total{method="GET",route="/r",status="200"} 17',
    ]);
    // Shown once for the instance, as each worker reads the same files.
    expect(await shown(lists, 'arkvory_tls_reload_failures_total')).toEqual(['arkvory_tls_reload_failures_total 2']);
  });

  it('keeps nothing of a worker gone before it answered', () => {
    const totals = new CarriedTotals<string>();
    totals.retire('b');
    expect(totals.retired()).toEqual([]);
  });
});
