/**
 * Rules come from several layers, highest first (spec 2.5, 3.1): the remote rules service
 * (remote-rules.ts, Phase 3) in front of the local rule store (the registry's replica). A layer
 * answers synchronously when it can (the local replica, a warm remote cache: no I/O on the hot
 * path) and with a promise only when it must ask (a cold remote cache, bounded by its timeout).
 * `undefined` means "nothing from this layer" (also: unreachable → fail open to the lower layers).
 * A rule name seen in a higher layer excludes the same name below, exactly like a higher tier.
 */
import type { Identifier } from './match.ts';
import type { Rule } from './rules.ts';

export type LayerAnswer = readonly Rule[] | undefined;

export interface RuleLayer {
  readonly name: string;
  rulesFor(limiter: string, identifier: Identifier): LayerAnswer | Promise<LayerAnswer>;
}

/** The rules of one check: a list, or a promise of one when a layer had to ask a service. */
export type RulesNow = readonly Rule[] | Promise<readonly Rule[]>;

export function isPromise<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | undefined)?.then === 'function';
}

function merge(answers: readonly LayerAnswer[]): readonly Rule[] {
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

/** Merges layers for one limiter: higher layers first, a name seen in a higher layer excludes lower ones. */
export function layeredRules(limiter: string, layers: readonly RuleLayer[]): (identifier: Identifier) => RulesNow {
  if (layers.length === 1) {
    const only = layers[0]!;
    return (identifier) => {
      const answer = only.rulesFor(limiter, identifier);
      return isPromise(answer) ? answer.then((a) => a ?? []) : (answer ?? []);
    };
  }
  return (identifier) => {
    const answers: Array<LayerAnswer | Promise<LayerAnswer>> = [];
    let pending = false;
    for (const layer of layers) {
      const answer = layer.rulesFor(limiter, identifier);
      if (isPromise(answer)) pending = true;
      answers.push(answer);
    }
    return pending ? Promise.all(answers).then(merge) : merge(answers as LayerAnswer[]);
  };
}
