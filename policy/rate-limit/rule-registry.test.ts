import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../clock.ts';
import { createLimiter } from './limiter.ts';
import { createMemoryCounterStore } from './memory-counter-store.ts';
import { createMemoryRuleDocuments } from './rule-documents.ts';
import { createRuleRegistry } from './rule-registry.ts';
import type { LimiterSpec, RuleSpec } from './rules.ts';

const log = pino({ level: 'silent' });
const available = new Map<string, LimiterSpec>([
  [
    'sign_in',
    {
      description: 'x',
      available_properties: ['ip', 'user'],
      default_rules: [{ name: 'by_ip', action: 'limit', characteristics: ['ip'], limit: 10, period_s: 60 }],
    },
  ],
  ['api', { description: 'y', available_properties: ['user'], default_rules: [] }],
]);
const fileRule: RuleSpec = { name: 'file_by_user', action: 'limit', characteristics: ['user'], limit: 5, period_s: 60 };

function setup(
  options: { file?: Map<string, RuleSpec[]>; documents?: ReturnType<typeof createMemoryRuleDocuments> } = {},
) {
  const documents = options.documents ?? createMemoryRuleDocuments();
  const clock = new ManualClock();
  const registry = createRuleRegistry({
    documents,
    available,
    fileRules: options.file ?? new Map([['sign_in', [fileRule]]]),
    clock,
    log,
    orphanGraceMs: 1000,
  });
  return { documents, clock, registry };
}
const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);

describe('rule registry (tiers, publish, replica, orphans)', () => {
  it('evaluates file > published > default; a same-name higher rule replaces the lower and keeps its counter', async () => {
    const { registry } = setup();
    await registry.start();
    expect(names(registry.rules('sign_in'))).toEqual(['file_by_user', 'by_ip']);
    const store = createMemoryCounterStore();
    const clock = new ManualClock();
    const limiter = createLimiter({ store, clock, log }, { name: 'sign_in', rules: () => registry.rules('sign_in') });
    for (let i = 0; i < 4; i++) await limiter.check({ ip: 'a', user: `u${i}` });
    await registry.publish({
      rate_limits: {
        sign_in: [
          { name: 'by_ip', action: 'limit', characteristics: ['ip'], limit: 4, period_s: 60 },
          { name: 'extra', action: 'log', limit: 1, period_s: 60 },
        ],
      },
    });
    expect(names(registry.rules('sign_in'))).toEqual(['file_by_user', 'by_ip', 'extra']);
    expect(registry.rules('sign_in')[1]!.limit).toBe(4);
    // The published by_ip inherited the default's counter (4 so far): the next request is the 5th.
    expect((await limiter.check({ ip: 'a', user: 'new' })).action).toBe('block');
    const [view] = await registry.show('sign_in');
    expect(view!.effective.map((t) => `${t.tier}:${t.spec.name}`)).toEqual([
      'file_rules:file_by_user',
      'published_rules:by_ip',
      'published_rules:extra',
    ]);
    expect(view!.tiers.default_rules.rules.map((r) => r.name)).toEqual(['by_ip']);
    registry.stop();
  });

  it('publish is all or nothing, leaves limiters outside the batch alone, and upserts by name', async () => {
    const { registry, documents } = setup();
    await registry.start();
    await registry.publish({
      rate_limits: { api: [{ name: 'a1', action: 'limit', characteristics: ['user'], limit: 1, period_s: 60 }] },
    });
    const bad = {
      rate_limits: {
        sign_in: [{ name: 'ok_rule', action: 'limit', limit: 1, period_s: 1 }],
        api: [{ name: 'a2', action: 'limit', characteristics: ['nope'], limit: 1, period_s: 60 }],
      },
    };
    await expect(registry.publish(bad)).rejects.toMatchObject({
      code: 'invalid_rules',
      problems: [expect.objectContaining({ message: expect.stringContaining('"nope" is not an available property') })],
    });
    expect(names(registry.rules('sign_in'))).toEqual(['file_by_user', 'by_ip']);
    await registry.publish({ rate_limits: { sign_in: { rules: [{ name: 's1', action: 'skip' }] } } });
    expect(names(registry.rules('api'))).toEqual(['a1']);
    await registry.publish({
      rate_limits: {
        api: [
          { name: 'a2', action: 'limit', limit: 2, period_s: 60 },
          { name: 'a1', action: 'limit', limit: 9, period_s: 60 },
        ],
      },
    });
    expect(names(registry.rules('api'))).toEqual(['a1', 'a2']);
    expect(registry.rules('api')[0]!.limit).toBe(9);
    // A failure inside the store's update writes nothing either.
    documents.failing = true;
    await expect(registry.publish({ rate_limits: { api: [{ name: 'a3', action: 'skip' }] } })).rejects.toThrow(
      'simulated outage',
    );
    documents.failing = false;
    await registry.refresh();
    expect(names(registry.rules('api'))).toEqual(['a1', 'a2']);
    await registry.unpublish('api', 'a1');
    expect(names(registry.rules('api'))).toEqual(['a2']);
    await expect(registry.unpublish('api', 'a1')).rejects.toMatchObject({ code: 'unknown_rule' });
    await expect(registry.unpublish('nope', 'a1')).rejects.toMatchObject({ code: 'unknown_limiter' });
    registry.stop();
  });

  it('a restart re-seeds file and default tiers and keeps what was published', async () => {
    const first = setup();
    await first.registry.start();
    await first.registry.publish({
      rate_limits: { sign_in: [{ name: 'pub', action: 'log', limit: 1, period_s: 60 }] },
    });
    first.registry.stop();
    const second = setup({ documents: first.documents, file: new Map() });
    await second.registry.start();
    expect(names(second.registry.rules('sign_in'))).toEqual(['pub', 'by_ip']);
    second.registry.stop();
  });

  it('keeps serving the replica while the store is down; never-read limiters use the compiled defaults', async () => {
    const { registry, documents } = setup();
    await registry.start();
    await registry.publish({ rate_limits: { api: [{ name: 'a1', action: 'limit', limit: 1, period_s: 60 }] } });
    documents.failing = true;
    expect(await registry.refresh()).toBe(false);
    expect(names(registry.rules('api'))).toEqual(['a1']);
    expect(registry.status().lastRefreshError).toContain('simulated outage');
    registry.stop();

    const down = createMemoryRuleDocuments();
    down.failing = true;
    const cold = setup({ documents: down });
    await cold.registry.start();
    expect(names(cold.registry.rules('sign_in'))).toEqual(['file_by_user', 'by_ip']);
    expect(cold.registry.status()).toMatchObject({ seeded: false, sources: { sign_in: 'compiled', api: 'compiled' } });
    down.failing = false;
    expect(await cold.registry.refresh()).toBe(true);
    expect(cold.registry.status()).toMatchObject({ seeded: true, sources: { sign_in: 'store', api: 'compiled' } });
    cold.registry.stop();
  });

  it('rejects an invalid stored document and keeps the last good rules', async () => {
    const { registry, documents } = setup();
    await registry.start();
    await registry.publish({ rate_limits: { api: [{ name: 'a1', action: 'limit', limit: 1, period_s: 60 }] } });
    await documents.update(
      ['api'],
      () =>
        new Map([
          [
            'api',
            {
              file_rules: { rules: [] },
              published_rules: { rules: [{ name: 'BAD NAME', action: 'limit' } as unknown as RuleSpec] },
              default_rules: { rules: [] },
            },
          ],
        ]),
    );
    expect(await registry.refresh()).toBe(true);
    expect(names(registry.rules('api'))).toEqual(['a1']);
    registry.stop();
  });

  it('collects an orphaned document only after the grace window', async () => {
    const { registry, documents, clock } = setup();
    await registry.start();
    await documents.update(
      ['retired'],
      () =>
        new Map([
          ['retired', { file_rules: { rules: [] }, published_rules: { rules: [] }, default_rules: { rules: [] } }],
        ]),
    );
    expect(await registry.collectOrphans()).toEqual({ marked: ['retired'], swept: [] });
    clock.advance(999);
    expect(await registry.collectOrphans()).toEqual({ marked: [], swept: [] });
    clock.advance(1);
    expect(await registry.collectOrphans()).toEqual({ marked: [], swept: ['retired'] });
    expect(await documents.listIndexed()).toEqual(['sign_in']);
    registry.stop();
  });

  it('never collects without a limiter list', async () => {
    const documents = createMemoryRuleDocuments();
    await documents.update(
      ['x'],
      () =>
        new Map([['x', { file_rules: { rules: [] }, published_rules: { rules: [] }, default_rules: { rules: [] } }]]),
    );
    const registry = createRuleRegistry({
      documents,
      available: new Map(),
      fileRules: new Map(),
      clock: new ManualClock(),
      log,
      orphanGraceMs: 0,
    });
    expect(await registry.collectOrphans()).toEqual({ marked: [], swept: [] });
    expect(await documents.listIndexed()).toEqual(['x']);
  });

  describe('a publish answers only once this process serves it', () => {
    /** Reads take their snapshot at once and answer when the test opens the gate (a slow link). */
    function gatedReads() {
      const inner = createMemoryRuleDocuments();
      const state = { gated: false, reads: 0, open: () => {} };
      const documents = {
        ...inner,
        async read(limiters: readonly string[]) {
          state.reads++;
          const snapshot = await inner.read(limiters);
          if (state.gated) await new Promise<void>((resolve) => (state.open = resolve));
          return snapshot;
        },
      };
      return { documents, state, inner };
    }

    it('a refresh in flight that read before the write is not taken for one after it', async () => {
      const { documents, state, inner } = gatedReads();
      const { registry } = setup({ documents: documents as ReturnType<typeof createMemoryRuleDocuments> });
      await registry.start();
      registry.stop();
      state.gated = true;
      const timerRefresh = registry.refresh(); // the interval fired just before the publish: old documents
      state.gated = false;
      let answered = false;
      const published = registry
        .publish({ rate_limits: { api: [{ name: 'new_rule', action: 'limit', limit: 1, period_s: 60 }] } })
        .then(() => (answered = true));
      await vi.waitFor(async () => expect((await inner.read(['api'])).has('api')).toBe(true)); // written
      expect(answered).toBe(false); // held while only the stale read is out
      state.open();
      await published;
      expect(names(registry.rules('api'))).toEqual(['new_rule']);
      await timerRefresh;
    });

    it('concurrent publishes behind a refresh in flight share one fresh read, and each sees its rules', async () => {
      const { documents, state, inner } = gatedReads();
      const { registry } = setup({ documents: documents as ReturnType<typeof createMemoryRuleDocuments> });
      await registry.start();
      registry.stop();
      state.gated = true;
      const timerRefresh = registry.refresh();
      state.gated = false;
      const readsBefore = state.reads;
      const rules = ['p1', 'p2', 'p3', 'p4', 'p5'];
      const seen = new Map<string, string[]>();
      const publishes = rules.map((name) =>
        registry
          .publish({ rate_limits: { api: [{ name, action: 'limit', limit: 1, period_s: 60 }] } })
          .then(() => seen.set(name, names(registry.rules('api')))),
      );
      // Every write lands while the stale read is still out.
      await vi.waitFor(async () => {
        const doc = (await inner.read(['api'])).get('api') as { published_rules: { rules: unknown[] } } | undefined;
        expect(doc?.published_rules.rules).toHaveLength(rules.length);
      });
      expect(state.reads).toBe(readsBefore);
      state.open();
      await Promise.all(publishes);
      await timerRefresh;
      for (const name of rules) expect(seen.get(name)).toEqual(rules);
      // One read queued behind the one in flight, whatever the number of publishes.
      expect(state.reads - readsBefore).toBe(1);
    });
  });

  describe('a write slower than the timeout answers what it did', () => {
    type Change = Parameters<ReturnType<typeof createMemoryRuleDocuments>['update']>[1];
    const rule = { name: 'late_rule', action: 'limit', limit: 1, period_s: 60 } as const;
    const stored = async (documents: ReturnType<typeof createMemoryRuleDocuments>) =>
      names(
        ((await documents.read(['api'])).get('api') as { published_rules: { rules: { name: string }[] } } | undefined)
          ?.published_rules.rules ?? [],
      );

    /**
     * Writes whose slow step (a read, a lock wait) ends when the caller stops them, or when the test
     * says so for a caller that cannot: `then` decides what the store does next.
     */
    async function slowWrites(
      then: (
        inner: ReturnType<typeof createMemoryRuleDocuments>,
        limiters: readonly string[],
        change: Change,
        signal?: AbortSignal,
      ) => Promise<void>,
    ) {
      const inner = createMemoryRuleDocuments();
      const state = { slow: false, resume: () => {} };
      const documents = {
        ...inner,
        async update(limiters: readonly string[], change: Change, signal?: AbortSignal) {
          if (!state.slow) return inner.update(limiters, change, signal);
          await new Promise<void>((resolve) => {
            state.resume = resolve;
            signal?.addEventListener('abort', () => resolve(), { once: true });
          });
          return then(inner, limiters, change, signal);
        },
      } as ReturnType<typeof createMemoryRuleDocuments>;
      const registry = createRuleRegistry({
        documents,
        available,
        fileRules: new Map(),
        clock: new ManualClock(),
        log,
        timeoutMs: 20,
      });
      await registry.start();
      registry.stop();
      state.slow = true;
      return { inner, state, registry };
    }

    it('stopped before it wrote: store_timeout, and nothing lands afterwards', async () => {
      const { inner, state, registry } = await slowWrites((store, limiters, change, signal) =>
        store.update(limiters, change, signal),
      );
      await expect(registry.publish({ rate_limits: { api: [rule] } })).rejects.toMatchObject({ code: 'store_timeout' });
      state.resume(); // a store that was never told to stop would write now
      await new Promise((resolve) => setImmediate(resolve));
      expect(await stored(inner)).toEqual([]);
      expect(names(registry.rules('api'))).toEqual([]);
    });

    it('landed after the timeout (its write already sent): the publish succeeds and is served', async () => {
      const { inner, registry } = await slowWrites((store, limiters, change) => store.update(limiters, change));
      await expect(registry.publish({ rate_limits: { api: [rule] } })).resolves.toEqual({
        limiters: ['api'],
        rules: 1,
      });
      expect(await stored(inner)).toEqual(['late_rule']);
      expect(names(registry.rules('api'))).toEqual(['late_rule']);
    });

    it('no answer even after it was stopped: store_outcome_unknown, never a plain failure', async () => {
      const { registry } = await slowWrites(() => new Promise<void>(() => {}));
      await expect(registry.publish({ rate_limits: { api: [rule] } })).rejects.toMatchObject({
        code: 'store_outcome_unknown',
      });
      await expect(registry.unpublish('api', 'late_rule')).rejects.toMatchObject({ code: 'store_outcome_unknown' });
    });
  });
});

describe('publishing nothing', () => {
  it('refuses a batch with no rules, or a limiter given an empty list, as invalid_rules saying how rules are removed; nothing is written', async () => {
    const { registry, documents } = setup();
    await registry.start();
    await registry.publish({
      rate_limits: { api: [{ name: 'kept', action: 'log', characteristics: ['user'], limit: 1, period_s: 60 }] },
    });
    const before = await documents.read(['api', 'sign_in']);
    for (const batch of [
      undefined,
      {},
      { rate_limits: {} },
      { rate_limits: { api: [] } },
      { rate_limits: { api: { rules: [] } } },
      {
        rate_limits: {
          api: [],
          sign_in: [{ name: 'x', action: 'log', characteristics: ['ip'], limit: 1, period_s: 60 }],
        },
      },
    ])
      await expect(registry.publish(batch), JSON.stringify(batch)).rejects.toMatchObject({
        code: 'invalid_rules',
        problems: [
          expect.objectContaining({
            message: expect.stringMatching(/removes none: remove a published rule with DELETE/),
          }),
        ],
      });
    expect(await documents.read(['api', 'sign_in'])).toEqual(before);
    expect(names(registry.rules('api'))).toEqual(['kept']);
  });
});
