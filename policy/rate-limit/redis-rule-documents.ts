/**
 * Rule documents in Redis, one JSON string per limiter (spec 2.6):
 *   <prefix><limiter>   the LimiterRules document, no expiry (configuration, not cache)
 *   <prefix>:index      set of limiters that have a document, written in the same step
 *   <prefix>:orphans    hash limiter → first-seen ms of documents no longer in available_limiters
 * `update` is optimistic: read, compute, then one Lua compare-and-set over all documents of the
 * batch (atomic); a concurrent writer makes it retry, until the caller's signal stops it. Its
 * failures say what was written: `store_unavailable` when nothing was (Redis unreachable, or it
 * refused the script), `store_outcome_unknown` when the connection failed while the script was sent.
 */
import type { Cluster, Redis } from 'ioredis';
import { RateLimitError } from './errors.ts';
import type { RuleDocumentStore } from './rule-documents.ts';
import type { LimiterRules } from './rules.ts';

export const DEFAULT_RULES_PREFIX = 'arkvory:ratelimit:rules:';
const MISSING = '\u0000missing';
const CAS_SCRIPT = `
-- Compare-and-set of several rule documents plus their index entries; all or nothing.
-- KEYS: index, doc1..docN. ARGV: n, expected1..N (or the missing marker), new1..N, limiter1..N
local n = tonumber(ARGV[1])
for i = 1, n do
  local current = redis.call('GET', KEYS[i + 1]) or ARGV[2 + 3 * n]
  if current ~= ARGV[1 + i] then return 0 end
end
for i = 1, n do
  redis.call('SET', KEYS[i + 1], ARGV[1 + n + i])
  redis.call('SADD', KEYS[1], ARGV[1 + 2 * n + i])
end
return 1
`;

/** Redis could not be asked, or refused: the update wrote nothing. */
function notWritten(err: unknown): RateLimitError {
  const why = err instanceof Error ? err.message : String(err);
  return new RateLimitError('store_unavailable', `the rule store could not be written (${why}); nothing was written`, {
    cause: err,
  });
}

type WithCas = (Redis | Cluster) & { arkvoryRulesCas(numKeys: number, ...args: string[]): Promise<number> };

/** With a Cluster, `prefix` must carry a hash tag (ruleDocumentsPrefix): every key here is used together. */
export function createRedisRuleDocuments(redis: Redis | Cluster, prefix = DEFAULT_RULES_PREFIX): RuleDocumentStore {
  if (!('arkvoryRulesCas' in redis)) redis.defineCommand('arkvoryRulesCas', { lua: CAS_SCRIPT });
  const client = redis as WithCas;
  const indexKey = `${prefix}:index`;
  const orphansKey = `${prefix}:orphans`;
  const docKey = (limiter: string) => `${prefix}${limiter}`;

  const readRaw = async (limiters: readonly string[]): Promise<Array<string | null>> =>
    limiters.length ? await redis.mget(...limiters.map(docKey)) : [];

  return {
    kind: 'redis',
    async read(limiters) {
      const raw = await readRaw(limiters);
      const out = new Map<string, unknown>();
      raw.forEach((text, i) => {
        if (text === null) return;
        try {
          out.set(limiters[i]!, JSON.parse(text));
        } catch {
          out.set(limiters[i]!, text); // not JSON: the validator rejects it and names the limiter
        }
      });
      return out;
    },
    async update(limiters, change: (current: Map<string, unknown>) => Map<string, LimiterRules>, signal) {
      for (let attempt = 0; attempt < 20; attempt++) {
        signal?.throwIfAborted();
        const raw = await readRaw(limiters).catch((err: unknown) => {
          throw notWritten(err);
        });
        const current = new Map<string, unknown>();
        raw.forEach((text, i) => {
          if (text === null) return;
          try {
            current.set(limiters[i]!, JSON.parse(text));
          } catch {
            current.set(limiters[i]!, text);
          }
        });
        const next = change(current);
        const names = limiters.filter((l) => next.has(l));
        if (names.length === 0) return;
        const expected = names.map((l) => raw[limiters.indexOf(l)] ?? MISSING);
        const values = names.map((l) => JSON.stringify(next.get(l)));
        // The last moment to stop: once the script is sent, only its answer says whether it wrote.
        signal?.throwIfAborted();
        // Not connected: the script would not be sent (no offline queue), so nothing is written.
        if (redis.status !== 'ready') throw notWritten(new Error(`Redis connection ${redis.status}`));
        let ok: number;
        try {
          ok = await client.arkvoryRulesCas(
            names.length + 1,
            indexKey,
            ...names.map(docKey),
            String(names.length),
            ...expected,
            ...values,
            ...names,
            MISSING,
          );
        } catch (err) {
          // A reply error is Redis refusing the script before its first write (its writes come
          // after every read); any other failure came after it was sent, and may follow a write.
          if ((err as { name?: unknown }).name === 'ReplyError') throw notWritten(err);
          throw new RateLimitError(
            'store_outcome_unknown',
            'the rule store failed while a write was under way; the change may or may not have been written',
            { cause: err },
          );
        }
        if (ok === 1) return;
      }
      throw new RateLimitError('store_unavailable', 'rule documents kept changing under the update; try again');
    },
    async listIndexed() {
      return (await redis.smembers(indexKey)).sort();
    },
    async readOrphanMarks() {
      const raw = await redis.hgetall(orphansKey);
      return new Map(Object.entries(raw).map(([l, t]) => [l, Number(t)]));
    },
    async writeOrphanMarks(marks, unmark) {
      const multi = redis.multi();
      for (const [l, t] of marks) multi.hsetnx(orphansKey, l, String(t));
      if (unmark.length) multi.hdel(orphansKey, ...unmark);
      await multi.exec();
    },
    async remove(limiters) {
      if (!limiters.length) return;
      await redis
        .multi()
        .del(...limiters.map(docKey))
        .srem(indexKey, ...limiters)
        .hdel(orphansKey, ...limiters)
        .exec();
    },
  };
}
