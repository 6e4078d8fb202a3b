/**
 * Usage statistics in PostgreSQL (migrations/0041): a batch added to both tables in one statement
 * (sums across gateways: ON CONFLICT adds), the flush's transaction and the question of what became
 * of one whose COMMIT went unanswered, and the reads behind the admin API and `arkvory stats`.
 */
import type pg from 'pg';
import { isCalendarDay } from '../../lib/calendar-date.ts';
import {
  CURSORS,
  type CursorShape,
  decodeCursor as decodePageCursor,
  invalidCursor,
  type Page,
  pageOf,
} from '../../policy/auth/page.ts';
import type { DeadlineConnection } from '../server/connection-deadline.ts';
import type { UsageBatch } from './usage-tally.ts';

type Queryable = Pick<pg.Pool, 'query'>;

/** PostgreSQL's largest bigint: a sum saturates there rather than failing its whole batch. */
const MAX_BIGINT = '9223372036854775807';
/** Sums past this lose precision in a JS number (and print in exponent form past 1e21): sent as at most this. */
const clamp = (n: number) => Math.min(n, Number.MAX_SAFE_INTEGER);
const add = (column: string) => `least(u.${column}::numeric + EXCLUDED.${column}, ${MAX_BIGINT})::bigint`;

const ADD_USAGE = `WITH artifacts AS (
       INSERT INTO arkvory_usage_artifacts AS u (repository, kind, name, version, asset, downloads, bytes, last_downloaded_at, last_downloader)
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::timestamptz[], $9::uuid[])
       ON CONFLICT (repository, kind, name, version, asset) DO UPDATE SET
         downloads = ${add('downloads')},
         bytes = ${add('bytes')},
         last_downloader = CASE WHEN EXCLUDED.last_downloaded_at >= u.last_downloaded_at
                                THEN EXCLUDED.last_downloader ELSE u.last_downloader END,
         last_downloaded_at = greatest(u.last_downloaded_at, EXCLUDED.last_downloaded_at)
     )
     INSERT INTO arkvory_usage_principal_days AS u (principal_id, day, requests, bytes_down, bytes_up)
     SELECT * FROM unnest($10::uuid[], $11::date[], $12::bigint[], $13::bigint[], $14::bigint[])
     ON CONFLICT (principal_id, day) DO UPDATE SET
       requests = ${add('requests')},
       bytes_down = ${add('bytes_down')},
       bytes_up = ${add('bytes_up')}`;

/**
 * Adds a drained batch to both tables in one statement: it is added whole or not at all, so a failed
 * flush can keep the batch for the next one without counting any part twice, and a reader never sees
 * a batch's downloads without its requests. A counter saturates at the bigint maximum: one row past
 * it would otherwise fail every later batch that names it.
 */
export async function addUsage(db: Queryable | UsageConnection, batch: UsageBatch): Promise<void> {
  const a = batch.artifacts;
  const p = batch.principalDays;
  if (a.length === 0 && p.length === 0) return;
  await db.query(ADD_USAGE, [
    a.map((r) => r.key.repository),
    a.map((r) => r.key.kind),
    a.map((r) => r.key.name),
    a.map((r) => r.key.version),
    a.map((r) => r.key.asset),
    a.map((r) => clamp(r.downloads)),
    a.map((r) => clamp(r.bytes)),
    a.map((r) => new Date(r.lastAtMs)),
    a.map((r) => r.lastDownloader),
    p.map((r) => r.principalId),
    p.map((r) => r.day),
    p.map((r) => clamp(r.requests)),
    p.map((r) => clamp(r.bytesDown)),
    p.map((r) => clamp(r.bytesUp)),
  ]);
}

/** A connection checked out of the pool for one flush; `release(err)` ends it (pg.PoolClient). */
export interface UsageConnection extends DeadlineConnection {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** Opens the flush's transaction and returns its id, by which its outcome can be read after a lost answer. */
export async function beginFlush(conn: UsageConnection): Promise<string> {
  await conn.query('BEGIN');
  const { rows } = await conn.query('SELECT pg_current_xact_id()::text AS xid');
  return rows[0]!.xid as string;
}

/**
 * What became of each transaction of `xids`: committed, aborted, still in progress, or null once the
 * server no longer knows (it is older than its commit log keeps). An id at or past the next one this
 * server gives (its own, asked for here, is that) was never given by it: a failover to a replica the
 * commit did not reach, or a restore, set its counter back. That transaction did not happen here, so
 * it is aborted; pg_xact_status would refuse it ("is in the future"), and each later flush with it.
 */
export async function transactionStatuses(
  conn: UsageConnection,
  xids: readonly string[],
): Promise<Map<string, 'committed' | 'aborted' | 'in progress' | null>> {
  // CASE evaluates pg_xact_status only for the ids the server gave; pg_current_xact_id() is one
  // past every id given before this statement (a snapshot's xmax may not be: it stops at the
  // oldest still running, so an open transaction would read as never given).
  const { rows } = await conn.query(
    `SELECT x AS xid,
            CASE WHEN x::xid8 >= pg_current_xact_id() THEN 'aborted' ELSE pg_xact_status(x::xid8) END AS status
       FROM unnest($1::text[]) AS x`,
    [xids],
  );
  return new Map(
    rows.map((r) => [r.xid as string, (r.status as 'committed' | 'aborted' | 'in progress' | null) ?? null]),
  );
}

export interface ArtifactStats {
  repository: string;
  kind: string;
  name: string;
  version: string;
  asset: string;
  downloads: number;
  bytes: number;
  lastDownloadedAt: string | null;
  lastDownloader: string | null;
  publishedAt?: string;
}

const IDLE_COLUMNS = `a.repository, a.kind, a.name, a.version, a.asset, coalesce(u.downloads, 0)::float8 AS downloads,
  coalesce(u.bytes, 0)::float8 AS bytes, u.last_downloaded_at, u.last_downloader::text AS last_downloader,
  a.created_at AS published_at`;

function artifactOf(r: Record<string, unknown>): ArtifactStats {
  return {
    repository: r.repository as string,
    kind: r.kind as string,
    name: r.name as string,
    version: r.version as string,
    asset: r.asset as string,
    downloads: r.downloads as number,
    bytes: r.bytes as number,
    lastDownloadedAt: r.last_downloaded_at ? (r.last_downloaded_at as Date).toISOString() : null,
    lastDownloader: (r.last_downloader as string | null) ?? null,
    ...(r.published_at ? { publishedAt: (r.published_at as Date).toISOString() } : {}),
  };
}

const BIGINT_MAX = 2n ** 63n - 1n;

/**
 * The sort key of a stats cursor, checked past its shape where PostgreSQL would refuse it with a
 * 500: a count beyond a bigint, a day the calendar does not have.
 */
export function decodeStatsCursor(raw: unknown, cursor: CursorShape): string[] | undefined {
  const key = decodePageCursor(raw, cursor);
  if (!key) return undefined;
  const count = cursor === CURSORS.statsPrincipals ? key[1]! : key[0]!;
  if (BigInt(count) > BIGINT_MAX || (cursor === CURSORS.statsPrincipals && !isCalendarDay(key[0]!)))
    throw invalidCursor();
  return key;
}

/**
 * One page from rows fetched with `LIMIT limit + 1`, each with its sort key (`key`, as text) beside
 * the item: the cursor of the page after it is the last item's key.
 */
function keyedPage<T>(rows: Array<{ item: T; key: string[] }>, limit: number, cursor: CursorShape): Page<T> {
  const page = pageOf(rows, limit, cursor, (r) => r.key);
  return { items: page.items.map((r) => r.item), nextCursor: page.nextCursor };
}

/** An artifact's place in its listing after its first sort value (the catalog key, in order). */
const ARTIFACT_KEY = ['repository', 'kind', 'name', 'version', 'asset'] as const;
const artifactKey = (r: Record<string, unknown>) => ARTIFACT_KEY.map((k) => r[k] as string);

/**
 * The most downloaded artifacts (of a repository), most first, one page at a time (`after`: the
 * cursor of the page before). The key is the download count, which a flush may raise between two
 * pages: such an artifact can be met twice or not at all, the others exactly once.
 */
export async function mostDownloaded(
  db: Queryable,
  options: { repository?: string; limit: number; cursor?: string | undefined },
): Promise<Page<ArtifactStats>> {
  const after = decodeStatsCursor(options.cursor, CURSORS.statsTop);
  const { rows } = await db.query(
    `SELECT u.repository, u.kind, u.name, u.version, u.asset, u.downloads::float8 AS downloads, u.bytes::float8 AS bytes,
            u.last_downloaded_at, u.last_downloader::text AS last_downloader, u.downloads::text AS downloads_key
       FROM arkvory_usage_artifacts u
      WHERE ($1::text IS NULL OR u.repository = $1)
        AND ($3::bigint IS NULL OR u.downloads < $3
             OR (u.downloads = $3 AND (u.repository, u.kind, u.name, u.version, u.asset) > ($4, $5, $6, $7, $8)))
      ORDER BY u.downloads DESC, u.repository, u.kind, u.name, u.version, u.asset LIMIT $2`,
    [options.repository ?? null, options.limit + 1, ...(after ?? [null, null, null, null, null, null])],
  );
  return keyedPage(
    rows.map((r) => ({ item: artifactOf(r), key: [r.downloads_key as string, ...artifactKey(r)] })),
    options.limit,
    CURSORS.statsTop,
  );
}

/**
 * Published artifacts not downloaded for `days` days (never downloaded, or last before then),
 * oldest publication first: candidates for deletion. One page at a time, as `mostDownloaded`.
 */
export async function notDownloadedFor(
  db: Queryable,
  options: { days: number; repository?: string; limit: number; cursor?: string | undefined },
): Promise<Page<ArtifactStats>> {
  const after = decodeStatsCursor(options.cursor, CURSORS.statsIdle);
  // The cursor keeps created_at in microseconds as text: a JS Date would round it to milliseconds.
  const { rows } = await db.query(
    `SELECT ${IDLE_COLUMNS}, (extract(epoch FROM a.created_at) * 1000000)::bigint::text AS created_us
       FROM arkvory_artifacts a
       LEFT JOIN arkvory_usage_artifacts u USING (repository, kind, name, version, asset)
      WHERE ($1::text IS NULL OR a.repository = $1)
        AND (u.last_downloaded_at IS NULL OR u.last_downloaded_at < now() - make_interval(days => $2))
        AND a.created_at < now() - make_interval(days => $2)
        AND ($4::bigint IS NULL
             OR ((extract(epoch FROM a.created_at) * 1000000)::bigint, a.repository, a.kind, a.name, a.version, a.asset)
                > ($4::bigint, $5, $6, $7, $8, $9))
      ORDER BY a.created_at, a.repository, a.kind, a.name, a.version, a.asset LIMIT $3`,
    [options.repository ?? null, options.days, options.limit + 1, ...(after ?? [null, null, null, null, null, null])],
  );
  return keyedPage(
    rows.map((r) => ({ item: artifactOf(r), key: [r.created_us as string, ...artifactKey(r)] })),
    options.limit,
    CURSORS.statsIdle,
  );
}

export interface PrincipalDayStats {
  principalId: string;
  principalName: string | null;
  day: string;
  requests: number;
  bytesDown: number;
  bytesUp: number;
}

/**
 * Per principal and day, newest day first, the most requests first within a day; `principal` is an
 * id or a name. One page at a time, as `mostDownloaded` (a flush may raise a day's requests
 * between two pages).
 */
export async function principalDays(
  db: Queryable,
  options: { principal?: string; since?: string; until?: string; limit: number; cursor?: string | undefined },
): Promise<Page<PrincipalDayStats>> {
  const after = decodeStatsCursor(options.cursor, CURSORS.statsPrincipals);
  const { rows } = await db.query(
    `SELECT u.principal_id::text AS principal_id, p.name AS principal_name, to_char(u.day, 'YYYY-MM-DD') AS day,
            u.requests::float8 AS requests, u.bytes_down::float8 AS bytes_down, u.bytes_up::float8 AS bytes_up,
            u.requests::text AS requests_key
       FROM arkvory_usage_principal_days u LEFT JOIN arkvory_principals p ON p.id = u.principal_id
      WHERE ($1::text IS NULL OR u.principal_id::text = $1 OR p.name = $1)
        AND ($2::date IS NULL OR u.day >= $2) AND ($3::date IS NULL OR u.day < $3)
        AND ($5::date IS NULL OR u.day < $5
             OR (u.day = $5 AND (u.requests < $6::bigint OR (u.requests = $6::bigint AND u.principal_id > $7::uuid))))
      ORDER BY u.day DESC, u.requests DESC, u.principal_id LIMIT $4`,
    [
      options.principal ?? null,
      options.since ?? null,
      options.until ?? null,
      options.limit + 1,
      ...(after ?? [null, null, null]),
    ],
  );
  return keyedPage(
    rows.map((r) => ({
      item: {
        principalId: r.principal_id,
        principalName: r.principal_name,
        day: r.day,
        requests: r.requests,
        bytesDown: r.bytes_down,
        bytesUp: r.bytes_up,
      },
      key: [r.day as string, r.requests_key as string, r.principal_id as string],
    })),
    options.limit,
    CURSORS.statsPrincipals,
  );
}
