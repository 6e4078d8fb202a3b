/**
 * Where the per-limiter `LimiterRules` documents live (spec 2.4–2.6). The key layout is private to
 * each implementation; only the registry (rule-registry.ts) calls these. Implementations:
 * Redis (redis-rule-documents.ts, the spec's store, used whenever ARKVORY_REDIS_URL is set),
 * PostgreSQL (pg-rule-documents.ts, migration 0005, for the embedded default without Redis) and
 * memory (below, for tests).
 */
import type { LimiterRules } from './rules.ts';

export interface RuleDocumentStore {
  readonly kind: 'redis' | 'postgres' | 'memory';
  /** Raw documents (decoded JSON, not yet validated) of these limiters; a missing one is absent. */
  read(limiters: readonly string[]): Promise<Map<string, unknown>>;
  /**
   * Atomically reads these limiters' documents, lets `change` compute replacements and writes them
   * all together with their index entries, or writes nothing when `change` throws. Once `signal` is
   * aborted it starts no further attempt and commits nothing more: it rejects with the signal's
   * reason only when nothing was written, and resolves when a write already sent landed.
   */
  update(
    limiters: readonly string[],
    change: (current: Map<string, unknown>) => Map<string, LimiterRules>,
    signal?: AbortSignal,
  ): Promise<void>;
  /** Limiters that have a document (the index the orphan collector diffs against). */
  listIndexed(): Promise<string[]>;
  /** When each orphaned limiter was first seen (ms). */
  readOrphanMarks(): Promise<Map<string, number>>;
  /** Records first-seen times (an existing mark is kept) and drops the marks of `unmark`. */
  writeOrphanMarks(marks: ReadonlyMap<string, number>, unmark: readonly string[]): Promise<void>;
  /** Deletes documents together with their index entries and orphan marks. */
  remove(limiters: readonly string[]): Promise<void>;
}

export function createMemoryRuleDocuments(): RuleDocumentStore & { failing: boolean } {
  const docs = new Map<string, string>();
  const marks = new Map<string, number>();
  const store = {
    kind: 'memory' as const,
    failing: false,
    check() {
      if (store.failing) throw new Error('memory rule store: simulated outage');
    },
    async read(limiters: readonly string[]) {
      store.check();
      const out = new Map<string, unknown>();
      for (const l of limiters) if (docs.has(l)) out.set(l, JSON.parse(docs.get(l)!));
      return out;
    },
    async update(
      limiters: readonly string[],
      change: (current: Map<string, unknown>) => Map<string, LimiterRules>,
      signal?: AbortSignal,
    ) {
      signal?.throwIfAborted();
      store.check();
      const current = new Map<string, unknown>();
      for (const l of limiters) if (docs.has(l)) current.set(l, JSON.parse(docs.get(l)!));
      const next = change(current);
      signal?.throwIfAborted();
      for (const [l, d] of next) docs.set(l, JSON.stringify(d));
    },
    async listIndexed() {
      store.check();
      return [...docs.keys()];
    },
    async readOrphanMarks() {
      store.check();
      return new Map(marks);
    },
    async writeOrphanMarks(set: ReadonlyMap<string, number>, unmark: readonly string[]) {
      store.check();
      for (const [l, t] of set) if (!marks.has(l)) marks.set(l, t);
      for (const l of unmark) marks.delete(l);
    },
    async remove(limiters: readonly string[]) {
      store.check();
      for (const l of limiters) {
        docs.delete(l);
        marks.delete(l);
      }
    },
  };
  return store;
}
