/**
 * Rule documents in PostgreSQL (migration 0005), for installations without Redis. The table is the
 * index; `update` serialises writers with a transaction-scoped advisory lock, and an aborted
 * signal rolls it back up to the COMMIT. Its failures say what was written, as the Redis store's
 * do: `store_unavailable` when nothing was (no connection, a statement refused or cut before the
 * COMMIT, a COMMIT the server answered with an error), `store_outcome_unknown` when the connection
 * was lost while the COMMIT was under way.
 */
import type pg from 'pg';
import { isConnectionLost } from '../../lib/connection-loss.ts';
import { RateLimitError } from './errors.ts';
import type { RuleDocumentStore } from './rule-documents.ts';
import type { LimiterRules } from './rules.ts';
import { jsonbText } from '../../lib/jsonb-text.ts';
import { withTransaction } from '../../lib/transaction.ts';

/** "arkvory-rl-rules" */
const LOCK_KEY = '7020121870183771251';

/** Writes documents inside the caller's transaction (update below; a restore's one transaction). */
export async function upsertPgRuleDocuments(
  client: pg.ClientBase,
  documents: ReadonlyMap<string, unknown>,
): Promise<void> {
  for (const [limiter, document] of documents) {
    await client.query(
      `INSERT INTO arkvory_rate_limit_rules (limiter, document) VALUES ($1, $2)
       ON CONFLICT (limiter) DO UPDATE SET document = EXCLUDED.document, updated_at = now()`,
      // A rule's description is an admin's free text: half a surrogate pair in it is no 500.
      [limiter, jsonbText(document)],
    );
  }
}

/** An error PostgreSQL itself sent (pg's DatabaseError carries the server's severity). */
function answeredByServer(err: unknown): boolean {
  return typeof (err as { severity?: unknown } | null)?.severity === 'string';
}

/** What a failed update wrote: nothing, unless the connection was lost while its COMMIT was under way. */
export function ruleWriteFailure(err: unknown, committing: boolean): RateLimitError {
  const why = err instanceof Error ? err.message : String(err);
  if (committing && (isConnectionLost(err) || !answeredByServer(err)))
    return new RateLimitError(
      'store_outcome_unknown',
      `the rule store failed while a write was being committed (${why}); the change may or may not have been written`,
      { cause: err },
    );
  return new RateLimitError('store_unavailable', `the rule store could not be written (${why}); nothing was written`, {
    cause: err,
  });
}

export function createPgRuleDocuments(pool: pg.Pool): RuleDocumentStore {
  return {
    kind: 'postgres',
    async read(limiters) {
      const { rows } = await pool.query<{ limiter: string; document: unknown }>(
        'SELECT limiter, document FROM arkvory_rate_limit_rules WHERE limiter = ANY($1)',
        [limiters],
      );
      return new Map(rows.map((r) => [r.limiter, r.document]));
    },
    async update(limiters, change: (current: Map<string, unknown>) => Map<string, LimiterRules>, signal) {
      signal?.throwIfAborted();
      /** The caller's own errors (the change refused, the signal's reason) pass through as they are. */
      let own: unknown;
      const stopIfAsked = () => {
        if (!signal?.aborted) return;
        own = signal.reason;
        throw own;
      };
      let committing = false;
      try {
        await withTransaction(pool, async (client) => {
          await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
          const { rows } = await client.query<{ limiter: string; document: unknown }>(
            'SELECT limiter, document FROM arkvory_rate_limit_rules WHERE limiter = ANY($1)',
            [limiters],
          );
          let next: Map<string, LimiterRules>;
          try {
            next = change(new Map(rows.map((r) => [r.limiter, r.document])));
          } catch (err) {
            own = err;
            throw err;
          }
          stopIfAsked();
          await upsertPgRuleDocuments(client, next);
          // A throw here rolls the transaction back; once COMMIT is sent, its answer decides.
          stopIfAsked();
          committing = true;
        });
      } catch (err) {
        if (err === own) throw err;
        throw ruleWriteFailure(err, committing);
      }
    },
    async listIndexed() {
      const { rows } = await pool.query<{ limiter: string }>(
        'SELECT limiter FROM arkvory_rate_limit_rules ORDER BY limiter',
      );
      return rows.map((r) => r.limiter);
    },
    async readOrphanMarks() {
      const { rows } = await pool.query<{ limiter: string; first_seen_ms: string }>(
        'SELECT limiter, first_seen_ms FROM arkvory_rate_limit_orphans',
      );
      return new Map(rows.map((r) => [r.limiter, Number(r.first_seen_ms)]));
    },
    async writeOrphanMarks(marks, unmark) {
      for (const [limiter, t] of marks) {
        await pool.query(
          'INSERT INTO arkvory_rate_limit_orphans (limiter, first_seen_ms) VALUES ($1, $2) ON CONFLICT (limiter) DO NOTHING',
          [limiter, t],
        );
      }
      if (unmark.length) await pool.query('DELETE FROM arkvory_rate_limit_orphans WHERE limiter = ANY($1)', [unmark]);
    },
    async remove(limiters) {
      if (!limiters.length) return;
      await pool.query('DELETE FROM arkvory_rate_limit_rules WHERE limiter = ANY($1)', [limiters]);
      await pool.query('DELETE FROM arkvory_rate_limit_orphans WHERE limiter = ANY($1)', [limiters]);
    },
  };
}
