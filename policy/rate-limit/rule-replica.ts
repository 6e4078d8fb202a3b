/**
 * What one process serves: per limiter, the last good `LimiterRules` document (from the store, or
 * compiled from the shipped defaults and this process's file) and its rules in evaluation order.
 * The hot path (`rules`) is a map lookup; `install` logs when a limiter's rules actually change.
 */
import type { Logger } from 'pino';
import {
  emptyDocument,
  mergeTiers,
  ruleFromSpec,
  type AvailableLimiters,
  type LimiterRules,
  type Rule,
  type RuleSpec,
} from './rules.ts';
import { retireRule } from './retired-rules.ts';

export type ReplicaSource = 'store' | 'compiled';

export interface ReplicaEntry {
  readonly source: ReplicaSource;
  readonly document: LimiterRules;
  readonly json: string;
  readonly rules: readonly Rule[];
}

/** The document a limiter has before (or without) the store: this process's file tier and the shipped defaults. */
export function compiledDocument(
  limiter: string,
  fileRules: ReadonlyMap<string, RuleSpec[]>,
  available: AvailableLimiters,
): LimiterRules {
  const doc = emptyDocument();
  doc.file_rules.rules = [...(fileRules.get(limiter) ?? [])];
  doc.default_rules.rules = [...(available.get(limiter)?.default_rules ?? [])];
  return doc;
}

/** Told the names of a limiter's rules a change removed, once they are retired (retired-rules.ts). */
export type RulesRemoved = (limiter: string, names: readonly string[]) => void;

export class RuleReplica {
  readonly #entries = new Map<string, ReplicaEntry>();
  readonly #log: Logger;
  readonly #onRemoved: RulesRemoved | undefined;

  constructor(log: Logger, onRemoved?: RulesRemoved) {
    this.#log = log;
    this.#onRemoved = onRemoved;
  }

  install(limiter: string, source: ReplicaSource, document: LimiterRules): void {
    const json = JSON.stringify(document);
    const current = this.#entries.get(limiter);
    if (current && current.json === json && current.source === source) return;
    const merged = mergeTiers(document);
    const rules = merged.map((t) => ruleFromSpec(t.spec));
    this.#entries.set(limiter, { source, document, json, rules });
    if (!current) return;
    this.#log.info(
      { limiter, source, rules: merged.map((t) => `${t.tier}:${t.spec.name}`) },
      'rate-limit rules changed',
    );
    // Retired before anyone is told: from here no check reports the removed rules' evaluations.
    const kept = new Set(rules.map((r) => r.name));
    const removed = current.rules.filter((r) => !kept.has(r.name));
    for (const rule of removed) retireRule(rule);
    if (removed.length > 0)
      this.#onRemoved?.(
        limiter,
        removed.map((r) => r.name),
      );
  }

  rules(limiter: string): readonly Rule[] {
    return this.#entries.get(limiter)?.rules ?? [];
  }

  entry(limiter: string): ReplicaEntry | undefined {
    return this.#entries.get(limiter);
  }

  sources(): Record<string, ReplicaSource> {
    return Object.fromEntries([...this.#entries].map(([l, e]) => [l, e.source]));
  }
}
