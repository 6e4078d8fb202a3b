import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { createPgRuleDocuments } from './pg-rule-documents.ts';
import type { RuleDocumentStore } from './rule-documents.ts';
import { createMemoryRuleDocuments } from './rule-documents.ts';
import { createRedisRuleDocuments } from './redis-rule-documents.ts';
import { emptyDocument, type LimiterRules } from './rules.ts';

const redis = useTestRedis();
const db = useTestDatabase();
let n = 0;

function doc(published: string[]): LimiterRules {
  const d = emptyDocument();
  d.published_rules.rules = published.map((name) => ({ name, action: 'skip' as const }));
  return d;
}

function conformance(name: string, open: () => Promise<RuleDocumentStore> | RuleDocumentStore): void {
  describe(`RuleDocumentStore: ${name}`, () => {
    it('writes several documents and their index in one update, and reads them back', async () => {
      const store = await open();
      await store.update(
        ['a', 'b'],
        () =>
          new Map([
            ['a', doc(['x'])],
            ['b', doc(['y'])],
          ]),
      );
      const read = await store.read(['a', 'b', 'c']);
      expect([...read.keys()].sort()).toEqual(['a', 'b']);
      expect(read.get('a')).toEqual(doc(['x']));
      expect(await store.listIndexed()).toEqual(['a', 'b']);
    });

    it('writes nothing when the change throws', async () => {
      const store = await open();
      await store.update(['a'], () => new Map([['a', doc(['x'])]]));
      await expect(
        store.update(['a', 'b'], () => {
          throw new Error('invalid');
        }),
      ).rejects.toThrow('invalid');
      expect((await store.read(['a'])).get('a')).toEqual(doc(['x']));
      expect(await store.listIndexed()).toEqual(['a']);
    });

    it('serialises concurrent read-modify-write updates: no lost update', async () => {
      const store = await open();
      await store.update(['a'], () => new Map([['a', doc([])]]));
      await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          store.update(['a'], (current) => {
            const d = current.get('a') as LimiterRules;
            return new Map([
              [
                'a',
                {
                  ...d,
                  published_rules: { rules: [...d.published_rules.rules, { name: `r${i}`, action: 'skip' as const }] },
                },
              ],
            ]);
          }),
        ),
      );
      const final = (await store.read(['a'])).get('a') as LimiterRules;
      expect(final.published_rules.rules.map((r) => r.name).sort()).toEqual([
        'r0',
        'r1',
        'r2',
        'r3',
        'r4',
        'r5',
        'r6',
        'r7',
      ]);
    });

    it('an update stopped before it writes (its signal aborted) writes nothing and rejects with the reason', async () => {
      const store = await open();
      await store.update(['a'], () => new Map([['a', doc(['x'])]]));
      const stop = new AbortController();
      const deadline = new Error('deadline passed');
      // Aborted while computing, i.e. after the read: the last moment before anything is sent.
      const stopped = store.update(
        ['a', 'b'],
        () => {
          stop.abort(deadline);
          return new Map([
            ['a', doc(['y'])],
            ['b', doc(['z'])],
          ]);
        },
        stop.signal,
      );
      await expect(stopped).rejects.toBe(deadline);
      const read = await store.read(['a', 'b']);
      expect([...read.keys()]).toEqual(['a']);
      expect(read.get('a')).toEqual(doc(['x']));
      expect(await store.listIndexed()).toEqual(['a']);
      // Already aborted: not even a read.
      let called = false;
      await expect(
        store.update(
          ['a'],
          () => {
            called = true;
            return new Map([['a', doc(['w'])]]);
          },
          stop.signal,
        ),
      ).rejects.toBe(deadline);
      expect(called).toBe(false);
    });

    it('keeps orphan marks (first seen wins) and removes documents with their index entries and marks', async () => {
      const store = await open();
      await store.update(['old'], () => new Map([['old', doc([])]]));
      await store.writeOrphanMarks(new Map([['old', 1000]]), []);
      await store.writeOrphanMarks(new Map([['old', 5000]]), []);
      expect((await store.readOrphanMarks()).get('old')).toBe(1000);
      await store.remove(['old']);
      expect(await store.listIndexed()).toEqual([]);
      expect((await store.readOrphanMarks()).size).toBe(0);
    });
  });
}

conformance('redis', () => createRedisRuleDocuments(redis.client, `${redis.prefix}docs${++n}:`));
conformance('postgres', async () => {
  await db.pool.query('TRUNCATE arkvory_rate_limit_rules, arkvory_rate_limit_orphans');
  return createPgRuleDocuments(db.pool);
});
conformance('memory', () => createMemoryRuleDocuments());

describe('RuleDocumentStore: postgres and free text', () => {
  it('stores a rule whose description holds half a surrogate pair, with U+FFFD for it', async () => {
    await db.pool.query('TRUNCATE arkvory_rate_limit_rules, arkvory_rate_limit_orphans');
    const store = createPgRuleDocuments(db.pool);
    const d = doc(['x']);
    d.published_rules.rules[0]!.description = 'a\ud800b';
    await store.update(['a'], () => new Map([['a', d]]));
    const read = (await store.read(['a'])).get('a') as LimiterRules;
    expect(read.published_rules.rules[0]!.description).toBe('a\ufffdb');
  });
});
