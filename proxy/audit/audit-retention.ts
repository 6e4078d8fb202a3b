/**
 * Retention of the audit trail (ARKVORY_AUDIT_RETENTION_DAYS), run by the writer: once at start and
 * then every hour, rows older than the retention are pruned through the owner's function
 * (migrations/0040). A failed run is logged and retried at the next tick.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { pruneAudit } from './audit-log.ts';

export const AUDIT_PRUNE_INTERVAL_MS = 3_600_000;

export function startAuditRetention(deps: { pool: pg.Pool; log: Logger; keepDays: number }): () => void {
  const run = () =>
    pruneAudit(deps.pool, deps.keepDays).then(
      (pruned) => {
        if (pruned > 0) deps.log.info({ pruned, keepDays: deps.keepDays }, 'audit events past their retention pruned');
      },
      (err: unknown) => deps.log.warn({ err }, 'audit retention: pruning failed; retried within the hour'),
    );
  void run();
  const timer = setInterval(run, AUDIT_PRUNE_INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}
