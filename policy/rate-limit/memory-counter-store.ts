/**
 * Counters in process memory: the embedded default when ARKVORY_REDIS_URL is unset (one standalone
 * process). It runs evaluate.ts itself, so it has the Redis store's semantics by construction; keys
 * expire logically at the same instant a Redis TTL would drop them and are swept in the background.
 */
import { evaluate, type Mode, type Outcome, type Plan, type RuleState } from './evaluate.ts';
import type { CounterStore } from './counter-store.ts';

interface Entry {
  value: number;
  members: Set<string> | undefined;
  expireAtMs: number;
}

export interface MemoryCounterStore extends CounterStore {
  /** Live keys (after dropping the expired ones at `nowMs`). */
  size(nowMs: number): number;
  /** Keys held right now, expired ones included until a read or the background sweep drops them. */
  heldKeys(): number;
}

export function createMemoryCounterStore(options: { sweepEvery?: number } = {}): MemoryCounterStore {
  const entries = new Map<string, Entry>();
  const sweepEvery = options.sweepEvery ?? 10_000;
  let writesSinceSweep = 0;

  const live = (key: string, nowMs: number): Entry | undefined => {
    const e = entries.get(key);
    if (e && e.expireAtMs <= nowMs) {
      entries.delete(key);
      return undefined;
    }
    return e;
  };
  const sweep = (nowMs: number) => {
    for (const [key, e] of entries) if (e.expireAtMs <= nowMs) entries.delete(key);
  };

  return {
    kind: 'memory',
    run(plan: Plan, input: { nowMs: number; cost: number; mode: Mode }): Outcome[] {
      const { nowMs } = input;
      const states: RuleState[] = plan.counting.map((p) => {
        const counter = live(p.counterKey, nowMs);
        // Read for every rule: evaluate ignores the ban of a rule without ban_for_s.
        const ban = live(p.banKey, nowMs);
        const count = p.distinctValue !== undefined ? (counter?.members?.size ?? 0) : (counter?.value ?? 0);
        return {
          count,
          banUntilMs: ban?.value ?? 0,
          isMember: p.distinctValue !== undefined && (counter?.members?.has(p.distinctValue) ?? false),
        };
      });
      const { outcomes, writes } = evaluate(plan, states, input);
      for (const w of writes) {
        if (w.op === 'ban') {
          entries.set(w.key, { value: w.untilMs, members: undefined, expireAtMs: w.untilMs });
          continue;
        }
        let e = live(w.key, nowMs);
        if (!e) {
          e = { value: 0, members: undefined, expireAtMs: w.expireAtMs };
          entries.set(w.key, e);
        }
        e.expireAtMs = w.expireAtMs;
        if (w.op === 'incr') e.value += w.by;
        else (e.members ??= new Set()).add(w.member);
      }
      writesSinceSweep += writes.length;
      if (writesSinceSweep >= sweepEvery) {
        writesSinceSweep = 0;
        sweep(nowMs);
      }
      return outcomes;
    },
    async clear(keys) {
      for (const key of keys) entries.delete(key);
    },
    size(nowMs) {
      sweep(nowMs);
      return entries.size;
    },
    heldKeys() {
      return entries.size;
    },
  };
}
