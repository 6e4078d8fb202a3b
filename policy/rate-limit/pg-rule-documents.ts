/**
 * Rule documents in PostgreSQL (migration 0005), for installations without Redis. The table is the
 * index; `update` serialises writers with a transaction-scoped advisory lock, and an aborted
 * signal rolls it back up to the COMMIT.
 */
import type pg from 'pg';
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
      await withTransaction(pool, async (client) => {
        await client.query('SELECT pg_advisory_xact_lock($1)', [LOCK_KEY]);
        const { rows } = await client.query<{ limiter: string; document: unknown }>(
          'SELECT limiter, document FROM arkvory_rate_limit_rules WHERE limiter = ANY($1)',
          [limiters],
        );
        const next = change(new Map(rows.map((r) => [r.limiter, r.document])));
        signal?.throwIfAborted();
        await upsertPgRuleDocuments(client, next);
        // A throw here rolls the transaction back; once COMMIT is sent, its answer decides.
        signal?.throwIfAborted();
      });
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
