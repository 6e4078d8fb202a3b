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

export class RuleReplica {
  readonly #entries = new Map<string, ReplicaEntry>();
  readonly #log: Logger;

  constructor(log: Logger) {
    this.#log = log;
  }

  install(limiter: string, source: ReplicaSource, document: LimiterRules): void {
    const json = JSON.stringify(document);
    const current = this.#entries.get(limiter);
    if (current && current.json === json && current.source === source) return;
    const merged = mergeTiers(document);
    this.#entries.set(limiter, { source, document, json, rules: merged.map((t) => ruleFromSpec(t.spec)) });
    if (current)
      this.#log.info(
        { limiter, source, rules: merged.map((t) => `${t.tier}:${t.spec.name}`) },
        'rate-limit rules changed',
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
