import { describe, expect, it } from 'vitest';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { counterStoreConformance, T0 } from '../../test/conformance/counter-store.ts';
import { buildPlan } from './evaluate.ts';
import { defineRule } from './rules.ts';

let n = 0;
counterStoreConformance('memory', () => ({ store: createMemoryCounterStore(), prefix: `t${++n}:` }));

describe('memory store', () => {
  it('forgets expired counters and bans, so memory stays bounded', async () => {
    const store = createMemoryCounterStore({ sweepEvery: 1 });
    const rule = defineRule({
      name: 'r',
      action: 'limit',
      characteristics: ['ip'],
      limit: 1,
      periodS: 60,
      banForS: 120,
    });
    for (let i = 0; i < 50; i++) {
      const plan = buildPlan('p:', 'l', [rule], { ip: `10.0.0.${i}` }, T0);
      await store.run(plan, { nowMs: T0, cost: 2, mode: 'check' });
    }
    expect(store.size(T0)).toBe(100);
    expect(store.size(T0 + 61_000)).toBe(50);
    expect(store.size(T0 + 120_000)).toBe(0);
  });
});
