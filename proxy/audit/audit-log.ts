/**
 * The audit trail in PostgreSQL (`arkvory_audit_events`, migrations/0040; 0086 lets a row have no known actor): append one entry, read
 * a filtered page newest first, prune past the retention. Runtime roles may only insert and read;
 * pruning goes through the owner's function, which keeps at least a day.
 */
import type pg from 'pg';
import { CURSORS, encodeCursor, type Page } from '../../policy/auth/page.ts';
import { jsonbText } from '../../lib/jsonb-text.ts';
import type { Actor, AuditEntry, AuditEvent, AuditFilter } from './audit-event.ts';

type Queryable = Pick<pg.Pool, 'query'> | pg.ClientBase;

/** Appends one entry. */
export async function recordAudit(db: Queryable, entry: AuditEntry): Promise<void> {
  const { actor } = entry;
  await db.query(
    `INSERT INTO arkvory_audit_events
       (action, actor_kind, principal_id, principal_name, operator, host, source, request_id, client_request_id,
        target, details)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb)`,
    [
      entry.action,
      actor.kind,
      actor.kind === 'principal' ? actor.principalId : null,
      actor.kind === 'principal' ? actor.principalName : null,
      actor.kind === 'operator' ? actor.operator.slice(0, 256) : null,
      actor.kind === 'operator' ? actor.host.slice(0, 256) : null,
      entry.source.slice(0, 128),
      entry.requestId ?? null,
      entry.clientRequestId ?? null,
      jsonbText(entry.target),
      jsonbText(entry.details),
    ],
  );
}

interface Row {
  id: string;
  at: Date;
  action: string;
  actor_kind: 'principal' | 'operator' | 'anonymous';
  principal_id: string | null;
  principal_name: string | null;
  operator: string | null;
  host: string | null;
  source: string;
  request_id: string | null;
  client_request_id: string | null;
  target: Record<string, unknown>;
  details: Record<string, unknown>;
}

function actorOf(r: Row): Actor {
  if (r.actor_kind === 'principal')
    return { kind: 'principal', principalId: r.principal_id!, principalName: r.principal_name ?? '' };
  if (r.actor_kind === 'operator') return { kind: 'operator', operator: r.operator!, host: r.host ?? '' };
  return { kind: 'anonymous' };
}

function eventOf(r: Row): AuditEvent {
  return {
    id: r.id,
    at: r.at.toISOString(),
    action: r.action,
    actor: actorOf(r),
    source: r.source,
    requestId: r.request_id,
    clientRequestId: r.client_request_id,
    target: r.target,
    details: r.details,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** One page of events matching `filter`, newest first. */
export async function listAudit(db: Queryable, filter: AuditFilter): Promise<Page<AuditEvent>> {
  const where: string[] = [];
  const params: unknown[] = [];
  const param = (value: unknown) => {
    params.push(value);
    return `$${params.length}`;
  };
  if (filter.action) {
    where.push(
      filter.action.includes('.') ? `action = ${param(filter.action)}` : `action LIKE ${param(`${filter.action}.%`)}`,
    );
  }
  if (filter.principal) {
    where.push(
      UUID.test(filter.principal)
        ? `principal_id = ${param(filter.principal)}::uuid`
        : `principal_name = ${param(filter.principal)}`,
    );
  }
  if (filter.since) where.push(`at >= ${param(filter.since)}`);
  if (filter.until) where.push(`at < ${param(filter.until)}`);
  if (filter.beforeId) where.push(`id < ${param(filter.beforeId)}::bigint`);
  const { rows } = await db.query<Row>(
    `SELECT id::text AS id, at, action, actor_kind, principal_id::text AS principal_id, principal_name, operator, host,
            source, request_id, client_request_id, target, details
       FROM arkvory_audit_events ${where.length ? `WHERE ${where.join(' AND ')}` : ''}
      ORDER BY arkvory_audit_events.id DESC LIMIT ${param(filter.limit + 1)}`,
    params,
  );
  const more = rows.length > filter.limit;
  const items = (more ? rows.slice(0, filter.limit) : rows).map(eventOf);
  return { items, nextCursor: more ? encodeCursor(CURSORS.audit, [items[items.length - 1]!.id]) : null };
}

/** Removes events older than `keepDays` (at least one day); returns how many went. */
export async function pruneAudit(db: Queryable, keepDays: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>('SELECT arkvory_audit_prune($1)::text AS n', [keepDays]);
  return Number(rows[0]!.n);
}
