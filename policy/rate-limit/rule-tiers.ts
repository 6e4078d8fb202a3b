/**
 * Rules come in tiers, highest first (spec 2.5, 3.1). Each `TierSource` answers for its tiers: the
 * remote rules service (remote-rules.ts, Phase 3: the tier above all) in front of the local replica
 * (the registry: file > published > default). A source answers synchronously when it can (the
 * replica, a warm remote cache: no I/O on the hot path) and with a promise only when it must ask (a
 * cold remote cache, bounded by its timeout). `undefined` means "nothing from this source" (also:
 * unreachable → fail open to the lower tiers). A rule name seen in a higher tier excludes the same
 * name below (a rule overrides by name).
 */
import type { Identifier } from './match.ts';
import type { Rule } from './rules.ts';
import { isPromise } from '../../lib/maybe-promise.ts';

export type TierAnswer = readonly Rule[] | undefined;

export interface TierSource {
  readonly name: string;
  rulesFor(limiter: string, identifier: Identifier): TierAnswer | Promise<TierAnswer>;
}

/** The rules of one check: a list, or a promise of one when a source had to ask a service. */
export type RulesNow = readonly Rule[] | Promise<readonly Rule[]>;

function merge(answers: readonly TierAnswer[]): readonly Rule[] {
  let nonEmpty = 0;
  let only: readonly Rule[] = [];
  for (const a of answers) {
    if (a?.length) {
      nonEmpty++;
      only = a;
    }
  }
  if (nonEmpty <= 1) return only;
  const out: Rule[] = [];
  const seen = new Set<string>();
  for (const answer of answers) {
    for (const rule of answer ?? []) {
      if (seen.has(rule.name)) continue;
      seen.add(rule.name);
      out.push(rule);
    }
  }
  return out;
}

/** Merges sources for one limiter: higher tiers first, a name seen in a higher tier excludes lower ones. */
export function tieredRules(limiter: string, sources: readonly TierSource[]): (identifier: Identifier) => RulesNow {
  if (sources.length === 1) {
    const only = sources[0]!;
    return (identifier) => {
      const answer = only.rulesFor(limiter, identifier);
      return isPromise(answer) ? answer.then((a) => a ?? []) : (answer ?? []);
    };
  }
  return (identifier) => {
    const answers: Array<TierAnswer | Promise<TierAnswer>> = [];
    let pending = false;
    for (const source of sources) {
      const answer = source.rulesFor(limiter, identifier);
      if (isPromise(answer)) pending = true;
      answers.push(answer);
    }
    return pending ? Promise.all(answers).then(merge) : merge(answers as TierAnswer[]);
  };
}
