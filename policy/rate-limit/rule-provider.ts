/**
 * The seam for Phase 3 (spec 3.1–3.3): rules can come from several layers, highest first. Today
 * there is one layer, the local rule store (the registry's replica). A remote rules service will be
 * another `RuleLayer` in front of it: it answers from its own per-identifier cache (no I/O on the hot
 * path), returns undefined when it has nothing or is unreachable (fail open to the local tiers),
 * and its rules replace same-name local rules exactly like a higher tier does.
 */
import type { Identifier } from './match.ts';
import type { Rule } from './rules.ts';

export interface RuleLayer {
  readonly name: string;
  rulesFor(limiter: string, identifier: Identifier): readonly Rule[] | undefined;
}

/** Merges layers for one limiter: higher layers first, a name seen in a higher layer excludes lower ones. */
export function layeredRules(limiter: string, layers: readonly RuleLayer[]): (identifier: Identifier) => readonly Rule[] {
  if (layers.length === 1) {
    const only = layers[0]!;
    return (identifier) => only.rulesFor(limiter, identifier) ?? [];
  }
  return (identifier) => {
    const out: Rule[] = [];
    const seen = new Set<string>();
    for (const layer of layers) {
      for (const rule of layer.rulesFor(limiter, identifier) ?? []) {
        if (seen.has(rule.name)) continue;
        seen.add(rule.name);
        out.push(rule);
      }
    }
    return out;
  };
}
