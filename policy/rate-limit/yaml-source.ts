/**
 * YAML rule documents with line numbers: `available_limiters.yaml` (shipped) and the operator's
 * `rate_limits.yaml`. Every problem names the file, the line and the key path. Parsing is pure
 * (text in); reading the file is the caller's business.
 */
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Node } from 'yaml';
import type { RuleProblem } from './errors.ts';
import {
  validateAvailableLimiters,
  validateRateLimits,
  type AvailableLimiters,
  type LimiterSpec,
  type RuleSpec,
} from './rules.ts';

interface Parsed {
  value: unknown;
  problems: RuleProblem[];
  lineOf(path: readonly (string | number)[]): number | undefined;
}

export function parseYaml(text: string, file: string): Parsed {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const lineAt = (offset: number) => lineCounter.linePos(offset).line;
  const problems: RuleProblem[] = [];
  for (const err of doc.errors)
    problems.push({ path: [], message: `YAML: ${err.message.split('\n')[0]}`, file, line: lineAt(err.pos[0]) });
  if (problems.length) return { value: undefined, problems, lineOf: () => undefined };
  const lineOf = (path: readonly (string | number)[]) => {
    let node: unknown = doc.contents;
    let line = node && (node as Node).range ? lineAt((node as Node).range![0]) : 1;
    for (const part of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(part));
        if (!pair) break;
        if (isScalar(pair.key) && pair.key.range) line = lineAt(pair.key.range[0]);
        node = pair.value;
      } else if (isSeq(node) && typeof part === 'number') {
        const item = node.items[part] as Node | undefined;
        if (!item) break;
        if (item.range) line = lineAt(item.range[0]);
        node = item;
      } else break;
    }
    return line;
  };
  return { value: doc.toJS({ maxAliasCount: 100 }), problems, lineOf };
}

function locate(
  problems: RuleProblem[],
  file: string,
  lineOf: (path: readonly (string | number)[]) => number | undefined,
): RuleProblem[] {
  return problems.map((p) => ({ ...p, file, line: p.line ?? lineOf(p.path) }));
}

export function parseAvailableLimiters(
  text: string,
  file: string,
): { available: Map<string, LimiterSpec>; problems: RuleProblem[] } {
  const parsed = parseYaml(text, file);
  if (parsed.problems.length) return { available: new Map(), problems: parsed.problems };
  const { available, problems } = validateAvailableLimiters(parsed.value);
  return { available, problems: locate(problems, file, parsed.lineOf) };
}

/** The operator file (or a publish file for the CLI): `rate_limits: { <limiter>: [rules] }`. */
export function parseRateLimits(
  text: string,
  file: string,
  available: AvailableLimiters,
): { rateLimits: Map<string, RuleSpec[]>; problems: RuleProblem[] } {
  const parsed = parseYaml(text, file);
  if (parsed.problems.length) return { rateLimits: new Map(), problems: parsed.problems };
  const { rateLimits, problems } = validateRateLimits(parsed.value, available);
  return { rateLimits, problems: locate(problems, file, parsed.lineOf) };
}
