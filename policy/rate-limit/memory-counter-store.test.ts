import { describe, expect, it } from 'vitest';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { counterStoreConformance, T0 } from '../../test/conformance/counter-store.ts';
import { buildPlan, type Outcome } from './evaluate.ts';
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
    expect(store.heldKeys()).toBe(100);
    expect(store.size(T0)).toBe(100);
    expect(store.size(T0 + 61_000)).toBe(50);
    expect(store.size(T0 + 120_000)).toBe(0);
  });

  it('sweeps expired keys in the background every sweepEvery writes, not before', async () => {
    const store = createMemoryCounterStore({ sweepEvery: 4 });
    const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 9, periodS: 60 });
    const run = (ip: string, nowMs: number) =>
      store.run(buildPlan('p:', 'l', [rule], { ip }, nowMs), { nowMs, cost: 1, mode: 'check' });
    run('a', T0);
    run('b', T0);
    run('c', T0);
    expect(store.heldKeys()).toBe(3);
    // A window later the three have expired; the 4th write triggers the sweep, the 3rd after it none.
    const later = T0 + 61_000;
    run('d', later);
    expect(store.heldKeys()).toBe(1);
    run('e', later + 60_000);
    run('f', later + 60_000);
    run('g', later + 60_000);
    expect(store.heldKeys()).toBe(4);
    run('h', later + 60_000);
    expect(store.heldKeys()).toBe(4);
  });

  it('a counter read after its expiry counts from zero (to the millisecond)', () => {
    const store = createMemoryCounterStore();
    const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 9, periodS: 60 });
    // Planned in the first window but run later (a slow check): the key expired at window end + 1 s.
    const plan = buildPlan('p:', 'l', [rule], { ip: 'a' }, T0);
    const count = (nowMs: number) => (store.run(plan, { nowMs, cost: 1, mode: 'check' }) as Outcome[])[0]!.count;
    expect(count(T0)).toBe(1);
    expect(count(T0 + 60_999)).toBe(2);
    expect(count(T0 + 61_000)).toBe(1);
    // A read alone (a peek) drops an expired key too.
    expect(store.heldKeys()).toBe(1);
    store.run(plan, { nowMs: T0 + 122_000, cost: 0, mode: 'peek' });
    expect(store.heldKeys()).toBe(0);
  });
});
