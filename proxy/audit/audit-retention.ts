/**
 * Retention of the audit trail (ARKVORY_AUDIT_RETENTION_DAYS), run by the writer: once at start and
 * then every hour, rows older than the retention are pruned through the owner's function
 * (migrations/0040). A failed run is logged and retried at the next tick. One run at a time, within
 * PRUNE_TIMEOUT_MS: on a database that takes the statement and never answers, a run ends its
 * connection and gives up rather than hold a pooled connection for good, one more every hour.
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { onConnectionWithin } from '../server/connection-deadline.ts';
import { pruneAudit } from './audit-log.ts';

export const AUDIT_PRUNE_INTERVAL_MS = 3_600_000;
export const PRUNE_TIMEOUT_MS = 60_000;

export function startAuditRetention(deps: {
  pool: pg.Pool;
  log: Logger;
  keepDays: number;
  intervalMs?: number;
  timeoutMs?: number;
}): () => void {
  let running = false;
  const run = () => {
    if (running) return;
    running = true;
    void onConnectionWithin<pg.PoolClient, number>(deps.pool, deps.timeoutMs ?? PRUNE_TIMEOUT_MS, (conn, within) =>
      within(pruneAudit(conn, deps.keepDays)),
    )
      .then(
        (pruned) => {
          if (pruned > 0)
            deps.log.info({ pruned, keepDays: deps.keepDays }, 'audit events past their retention pruned');
        },
        (err: unknown) => deps.log.warn({ err }, 'audit retention: pruning failed; retried within the hour'),
      )
      .finally(() => {
        running = false;
      });
  };
  run();
  const timer = setInterval(run, deps.intervalMs ?? AUDIT_PRUNE_INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}
