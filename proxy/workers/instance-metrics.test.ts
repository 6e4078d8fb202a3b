import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { counter, gauge } from '../metrics/families.ts';
import { STORE_STATES, type StoreState } from '../store-health/store-health.ts';
import { type Family, sumInstance } from './instance-metrics.ts';

/** A worker's families as it sends them: its store state and its open connections bound. */
async function worker(store: StoreState, connections: number): Promise<Family[]> {
  const registry = new Registry();
  gauge(registry, 'arkvory_store_state', function () {
    for (const state of STORE_STATES) this.set({ state }, state === store ? 1 : 0);
  });
  gauge(registry, 'arkvory_workers', function () {
    this.set({ state: 'serving' }, connections);
  });
  return (await registry.getMetricsAsJSON()) as Family[];
}

async function lines(lists: Family[][], name: string): Promise<string[]> {
  const text = await sumInstance(lists).body;
  return text.split('\n').filter((l) => l.startsWith(`${name}{`));
}

describe('sumInstance', () => {
  it('one store state for the instance: the worst any worker is in', async () => {
    expect(await lines([await worker('ok', 1), await worker('unreachable', 1)], 'arkvory_store_state')).toEqual([
      'arkvory_store_state{state="ok"} 0',
      'arkvory_store_state{state="degraded"} 0',
      'arkvory_store_state{state="unreachable"} 1',
    ]);
    expect(await lines([await worker('degraded', 1), await worker('ok', 1)], 'arkvory_store_state')).toEqual([
      'arkvory_store_state{state="ok"} 0',
      'arkvory_store_state{state="degraded"} 1',
      'arkvory_store_state{state="unreachable"} 0',
    ]);
    expect(await lines([await worker('ok', 1), await worker('ok', 1)], 'arkvory_store_state')).toEqual([
      'arkvory_store_state{state="ok"} 1',
      'arkvory_store_state{state="degraded"} 0',
      'arkvory_store_state{state="unreachable"} 0',
    ]);
  });

  it('certificate reload failures count once per broken state, not once per worker that read it', async () => {
    const reloads = async (failures: number): Promise<Family[]> => {
      const registry = new Registry();
      counter(registry, 'arkvory_tls_reload_failures_total').inc(failures);
      return (await registry.getMetricsAsJSON()) as Family[];
    };
    const text = await sumInstance([await reloads(2), await reloads(2), await reloads(1)]).body;
    expect(text.split('\n').filter((l) => l.startsWith('arkvory_tls_reload_failures_total '))).toEqual([
      'arkvory_tls_reload_failures_total 2',
    ]);
  });

  it('other families are summed', async () => {
    expect(await lines([await worker('ok', 2), await worker('ok', 3)], 'arkvory_workers')).toEqual([
      'arkvory_workers{state="serving"} 5',
    ]);
  });
});
