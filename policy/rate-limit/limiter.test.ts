import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../clock.ts';
import { createLimiter } from './limiter.ts';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { createRateLimitMetrics, METRIC_NAMES, REMOVED_METRIC_NAMES } from './metrics.ts';
import { defineRule } from './rules.ts';
import type { CounterStore } from './counter-store.ts';

const rule = defineRule({ name: 'r', action: 'limit', characteristics: ['ip'], limit: 1, periodS: 60 });

function capturingLog() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}

const FAILED_MSG = 'rate-limit store failed; failing open except for rules with on_store_error: deny';

describe('limiter', () => {
  it('fails closed on a store error (rejected or thrown) where an applicable rule says on_store_error: deny', async () => {
    const closed = defineRule({
      name: 'closed',
      action: 'limit',
      characteristics: ['ip'],
      limit: 1,
      periodS: 60,
      match: { ip: 'a' },
      onStoreError: 'deny',
    });
    const stores: CounterStore[] = [
      { kind: 'redis', run: async () => Promise.reject(new Error('boom')), clear: async () => undefined },
      {
        kind: 'redis',
        run: () => {
          throw new Error('boom');
        },
        clear: async () => undefined,
      },
    ];
    for (const store of stores) {
      const registry = new Registry();
      const limiter = createLimiter(
        { store, clock: new ManualClock(), log: pino({ level: 'silent' }), metrics: createRateLimitMetrics(registry) },
        { name: 'lim', rules: [rule, closed] },
      );
      expect(await limiter.check({ ip: 'a' })).toMatchObject({
        action: 'block',
        exceeded: false,
        rule: { name: 'closed' },
        error: expect.objectContaining({ message: 'boom' }),
      });
      expect(await limiter.peek({ ip: 'a' })).toMatchObject({ action: 'block', rule: { name: 'closed' } });
      // The deny rule does not match this identifier: the other rule fails open.
      expect(await limiter.check({ ip: 'b' })).toMatchObject({ action: 'allow', rule: undefined });
      expect(await registry.getSingleMetricAsString(METRIC_NAMES.ruleEvaluations)).toContain(
        'rule="closed",action="limit",result="store_error"} 1',
      );
    }
  });

  it('fails open on a store error: allows, sets error, no info; logs once per interval and counts every one', async () => {
    const failing: CounterStore = {
      kind: 'memory',
      run: async () => Promise.reject(new Error('boom')),
      clear: async () => undefined,
    };
    const { log, lines } = capturingLog();
    const registry = new Registry();
    const clock = new ManualClock();
    const limiter = createLimiter(
      { store: failing, clock, log, metrics: createRateLimitMetrics(registry), errorLogIntervalMs: 10_000 },
      { name: 'lim', rules: [rule] },
    );
    for (let i = 0; i < 3; i++)
      expect(await limiter.check({ ip: 'a' })).toMatchObject({
        action: 'allow',
        exceeded: false,
        info: undefined,
        error: expect.objectContaining({ message: 'boom' }),
      });
    expect(lines.filter((l) => l.msg === FAILED_MSG)).toHaveLength(1);
    clock.advance(10_000);
    await limiter.peek({ ip: 'a' });
    const logged = lines.filter((l) => l.msg === FAILED_MSG);
    expect(logged).toHaveLength(2);
    expect(logged[1]).toMatchObject({ suppressed: 2, operation: 'peek' });
    expect(await registry.getSingleMetricAsString(METRIC_NAMES.checks)).toContain(
      'action="allow",matched="false",error="true"} 3',
    );
    // Spec 1.10: the pre-split families are gone; a failed clear is only logged.
    await limiter.clear({ ip: 'a' });
    for (const removed of REMOVED_METRIC_NAMES) expect(registry.getSingleMetric(removed)).toBeUndefined();
    expect((await registry.getMetricsAsJSON()).map((m) => m.name).sort()).toEqual(
      [METRIC_NAMES.checks, METRIC_NAMES.peeks, METRIC_NAMES.ruleEvaluations].sort(),
    );
    expect(await registry.getSingleMetricAsString(METRIC_NAMES.peeks)).toContain('action="allow",error="true"} 1');
  });

  it('fails open with store_timeout when the store hangs longer than timeoutMs', async () => {
    vi.useFakeTimers();
    try {
      const hanging: CounterStore = {
        kind: 'redis',
        run: () => new Promise(() => {}),
        clear: () => new Promise(() => {}),
      };
      const limiter = createLimiter(
        { store: hanging, clock: new ManualClock(), log: pino({ level: 'silent' }), timeoutMs: 100 },
        { name: 'lim', rules: [rule] },
      );
      const pending = limiter.check({ ip: 'a' });
      await vi.advanceTimersByTimeAsync(99);
      let settled = false;
      void pending.then(() => (settled = true));
      await Promise.resolve();
      expect(settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      const result = await pending;
      expect(result.action).toBe('allow');
      expect((result.error as { code?: string }).code).toBe('store_timeout');
    } finally {
      vi.useRealTimers();
    }
  });

  it('leaves the wait to a store that bounds it itself: tells it the timeout and arms no timer', async () => {
    vi.useFakeTimers();
    try {
      const inputs: unknown[] = [];
      const bounding: CounterStore = {
        kind: 'redis',
        boundsOwnWait: true,
        run: (_plan, input) => {
          inputs.push(input);
          return new Promise(() => {});
        },
        clear: () => new Promise(() => {}),
      };
      const limiter = createLimiter(
        { store: bounding, clock: new ManualClock(), log: pino({ level: 'silent' }), timeoutMs: 100 },
        { name: 'lim', rules: [rule] },
      );
      void limiter.check({ ip: 'a' });
      void limiter.peek({ ip: 'a' });
      await Promise.resolve();
      expect(inputs).toEqual([
        expect.objectContaining({ mode: 'check', timeoutMs: 100 }),
        expect.objectContaining({ mode: 'peek', timeoutMs: 100 }),
      ]);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('counts one check per call, one evaluation per rule, and does no I/O when no rule applies', async () => {
    const registry = new Registry();
    const store = createMemoryCounterStore();
    const run = vi.spyOn(store, 'run');
    const rules = [
      defineRule({ name: 'shadow', action: 'log', limit: 5, periodS: 60 }),
      defineRule({ name: 'only_put', action: 'limit', limit: 5, periodS: 60, match: { method: 'PUT' } }),
    ];
    const limiter = createLimiter(
      { store, clock: new ManualClock(), log: pino({ level: 'silent' }), metrics: createRateLimitMetrics(registry) },
      { name: 'lim', rules },
    );
    await limiter.check({ method: 'PUT' });
    expect(await registry.getSingleMetricAsString(METRIC_NAMES.checks)).toContain(
      'limiter="lim",action="allow",matched="true",error="false"} 1',
    );
    const evaluations = await registry.getSingleMetricAsString(METRIC_NAMES.ruleEvaluations);
    expect(evaluations).toContain('rule="shadow",action="log",result="allow"} 1');
    expect(evaluations).toContain('rule="only_put",action="limit",result="allow"} 1');
    const none = createLimiter(
      { store, clock: new ManualClock(), log: pino({ level: 'silent' }) },
      { name: 'lim2', rules: [rules[1]!] },
    );
    run.mockClear();
    expect(await none.check({ method: 'GET' })).toMatchObject({ action: 'allow', rule: undefined, info: undefined });
    expect(run).not.toHaveBeenCalled();
  });

  it('rejects a negative or non-finite cost', async () => {
    const limiter = createLimiter(
      { store: createMemoryCounterStore(), clock: new ManualClock(), log: pino({ level: 'silent' }) },
      { name: 'lim', rules: [rule] },
    );
    await expect(limiter.check({ ip: 'a' }, { cost: -1 })).rejects.toThrow(RangeError);
    await expect(limiter.check({ ip: 'a' }, { cost: Number.NaN })).rejects.toThrow(RangeError);
  });

  it('checkNow and peekNow answer at once (no promise) from counters in memory, with the verdicts and metrics of check and peek', async () => {
    const clock = new ManualClock();
    const registry = new Registry();
    const limiter = createLimiter(
      {
        store: createMemoryCounterStore(),
        clock,
        log: pino({ level: 'silent' }),
        metrics: createRateLimitMetrics(registry),
      },
      { name: 'lim', rules: [rule] },
    );
    const peeked = limiter.peekNow({ ip: 'a' });
    expect(peeked).not.toBeInstanceOf(Promise);
    expect(peeked).toMatchObject({ action: 'allow' });
    const first = limiter.checkNow({ ip: 'a' });
    expect(first).not.toBeInstanceOf(Promise);
    expect(first).toMatchObject({ action: 'allow', info: { remaining: 0 } });
    expect(limiter.checkNow({ ip: 'a' })).toMatchObject({ action: 'block' });
    // The same counters as check: the async form sees what checkNow counted.
    expect(await limiter.peek({ ip: 'a' }, { cost: 0 })).toMatchObject({ action: 'block' });
    expect(() => limiter.checkNow({ ip: 'a' }, { cost: -1 })).toThrow(RangeError);
    const checks = (await registry.getSingleMetricAsString(METRIC_NAMES.checks)).split('\n');
    expect(checks.some((l) => l.includes('action="block"') && l.endsWith(' 1'))).toBe(true);
  });
});
