/**
 * Orphaned rule documents (limiters no longer in available_limiters.yaml): marked when first seen,
 * deleted only after a grace window, and never without the limiter list (spec 2.5).
 */
import type { Logger } from 'pino';
import type { RuleDocumentStore } from './rule-documents.ts';
import { withTimeout } from './timeout.ts';

export async function collectOrphanDocuments(
  store: RuleDocumentStore,
  options: { limiters: readonly string[]; nowMs: number; graceMs: number; timeoutMs: number; log: Logger },
): Promise<{ marked: string[]; swept: string[] }> {
  const { limiters, nowMs, graceMs, timeoutMs, log } = options;
  if (limiters.length === 0) return { marked: [], swept: [] }; // no limiter list: never collect
  const known = new Set(limiters);
  const indexed = await withTimeout(store.listIndexed(), timeoutMs, 'the rule store');
  const marks = await withTimeout(store.readOrphanMarks(), timeoutMs, 'the rule store');
  const marked: string[] = [];
  const swept: string[] = [];
  const newMarks = new Map<string, number>();
  for (const l of indexed.filter((name) => !known.has(name))) {
    const first = marks.get(l);
    if (first === undefined) {
      newMarks.set(l, nowMs);
      marked.push(l);
    } else if (nowMs - first >= graceMs) swept.push(l);
  }
  const unmark = [...marks.keys()].filter((l) => known.has(l) || !indexed.includes(l));
  if (newMarks.size || unmark.length)
    await withTimeout(store.writeOrphanMarks(newMarks, unmark), timeoutMs, 'the rule store');
  if (swept.length) await withTimeout(store.remove(swept), timeoutMs, 'the rule store');
  if (marked.length || swept.length) log.info({ marked, swept, graceMs }, 'rate-limit orphan documents');
  return { marked, swept };
}
