/**
 * Usage statistics on a gateway: each request's principal and bytes, and each download (an answer
 * of which some body went out), counted in memory (usage-tally.ts) and added to the database every
 * flush interval in one batch, and once more on a graceful stop. A crash (kill -9) loses at most
 * what was counted since the last flush: one ARKVORY_USAGE_STATS_FLUSH_SECONDS
 * (docs/observability.md). Past MAX_ROWS distinct rows a flush starts early; what a failed flush
 * held is kept for the next one. Twice MAX_ROWS are held at most: a count for a row past that is
 * dropped, counted (arkvory_usage_dropped_total) and reported once an interval.
 */
import { isHttp2 } from '../server/http2-messages.ts';
import pg from 'pg';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import { systemTimers, type TimerHandle, type Timers } from '../../policy/timers.ts';
import type { ArtifactKey, ArtifactKind } from '../../storage-adapter/catalog/catalog.ts';
import { APT_TEMPLATE, aptAssetKey, CONTENT_TEMPLATES, keyFromParams } from '../content/paths.ts';
import type { RequestContext, RequestObservation } from '../server/route-types.ts';
import { ConnectionDeadline, onConnectionWithin } from '../server/connection-deadline.ts';
import { addUsage, beginFlush, transactionStatuses, type UsageConnection } from './usage-store.ts';
import { type UsageBatch, type UsageDropped, UsageTally } from './usage-tally.ts';

export const MAX_ROWS = 50_000;

const DOWNLOAD_ROUTES: ReadonlyMap<string, ArtifactKind> = new Map(
  (['artifact', 'package', 'asset'] as const).map((kind) => [`${CONTENT_TEMPLATES[kind]}/content`, kind]),
);

/** The artifact a download route's parameters name (pure). */
export function downloadedKey(route: string, params: Readonly<Record<string, string>>): ArtifactKey | undefined {
  if (route === APT_TEMPLATE) return aptAssetKey(params);
  const kind = DOWNLOAD_ROUTES.get(route);
  return kind === undefined ? undefined : keyFromParams(kind, params);
}

export interface UsageRecorder {
  observe(ctx: RequestContext, observation: RequestObservation): void;
  /** Adds what was counted to the database now, or joins the flush in flight. */
  flush(): Promise<void>;
  /** The last flush, within STOP_BOUND_MS; no more timer. */
  stop(): Promise<void>;
  /** What the metrics read (proxy/metrics/usage-metrics.ts). */
  readonly status: UsageStatus;
}

export interface UsageStatus {
  /** Distinct rows held in memory: counted and not yet known to be in the database. */
  readonly pendingRows: number;
  /** Downloads and requests that will never reach the database. */
  readonly dropped: Readonly<UsageDropped>;
  readonly flushFailures: { readonly failed: number; readonly timeout: number };
}

/** A flush that has not finished by then is abandoned: its connection is ended and it counts as failed. */
export const FLUSH_TIMEOUT_MS = 15_000;
/** stop() waits this long at most (under the 5 s its gateway's close steps share; it is the first: proxy/server/close-steps.ts). */
export const STOP_BOUND_MS = 4_000;

export interface UsageRecorderDeps {
  pool: { connect(): Promise<UsageConnection> };
  log: Logger;
  clock: Clock;
  flushMs: number;
  timers?: Timers;
  /** Distinct rows past which a flush starts early; twice this are held at most. */
  maxRows?: number;
  flushTimeoutMs?: number;
}

const countsOf = (batch: UsageBatch) => ({
  downloads: batch.artifacts.reduce((n, a) => n + a.downloads, 0),
  requests: batch.principalDays.reduce((n, p) => n + p.requests, 0),
});
const rowsOf = (batch: UsageBatch) => batch.artifacts.length + batch.principalDays.length;

/**
 * At most one flush runs at a time, within its timeout; what is counted meanwhile waits in the
 * bounded tally for the next one. A flush is one transaction: one that failed or timed out before
 * its COMMIT was sent (or whose COMMIT was answered ERROR) was not committed, so its batch goes back
 * into the tally; one whose COMMIT went unanswered (or was answered FATAL or PANIC) is in doubt, kept aside with its transaction id, and each later flush
 * first asks the database what became of it (committed: done; aborted: back into the tally; still
 * in progress: asked again next time, while newer counts go on being sent), so a retry never counts
 * a batch twice.
 */
export function startUsageRecorder(deps: UsageRecorderDeps): UsageRecorder {
  const timers = deps.timers ?? systemTimers;
  const maxRows = deps.maxRows ?? MAX_ROWS;
  const flushTimeoutMs = deps.flushTimeoutMs ?? FLUSH_TIMEOUT_MS;
  const tally = new UsageTally(2 * maxRows);
  const dropped = tally.dropped;
  const flushFailures = { failed: 0, timeout: 0 };
  /** Batches whose COMMIT went unanswered, by transaction id, until the database says what became of them. */
  let doubts: Array<{ xid: string; batch: UsageBatch }> = [];
  /** The batch of the flush in flight. */
  let sending: UsageBatch | undefined;
  const asideRows = () => (sending ? rowsOf(sending) : 0) + doubts.reduce((n, d) => n + rowsOf(d.batch), 0);
  // Twice maxRows in all, in the tally or aside: what a flush holds leaves that much less room.
  const reserve = () => {
    tally.capacity = 2 * maxRows - asideRows();
  };
  let inFlight: Promise<void> | undefined;
  let abandon: (() => void) | undefined;
  // An early flush only after one that worked: a failing database is tried once an interval.
  let lastFailed = false;
  let stopped = false;
  const reported = { downloads: 0, requests: 0 };

  /** One line an interval at most for what was dropped since the last. */
  const reportDropped = () => {
    const downloads = dropped.downloads - reported.downloads;
    const requests = dropped.requests - reported.requests;
    if (downloads === 0 && requests === 0) return;
    reported.downloads = dropped.downloads;
    reported.requests = dropped.requests;
    deps.log.error(
      { downloads, requests, pendingRows: status.pendingRows, maxRows: 2 * maxRows },
      'usage statistics: counts dropped since the last report (the backlog was full, or a flush could not be confirmed)',
    );
  };

  const runFlush = async (timeoutMs: number): Promise<void> => {
    let batch: UsageBatch | undefined;
    let commitSent = false;
    let xid = '';
    try {
      await onConnectionWithin(
        deps.pool,
        timeoutMs,
        async (conn, within) => {
          if (doubts.length > 0) {
            const outcomes = await within(
              transactionStatuses(
                conn,
                doubts.map((d) => d.xid),
              ),
            );
            // Still in progress (its session blocked in the server): asked again next time.
            const settled = doubts.filter((d) => outcomes.get(d.xid) !== 'in progress');
            doubts = doubts.filter((d) => outcomes.get(d.xid) === 'in progress');
            reserve();
            for (const d of settled) {
              const outcome = outcomes.get(d.xid);
              if (outcome === 'aborted') tally.restore(d.batch);
              else if (outcome !== 'committed') {
                // The server no longer knows it: counted or not, it is not sent again.
                const lost = countsOf(d.batch);
                dropped.downloads += lost.downloads;
                dropped.requests += lost.requests;
              }
            }
          }
          batch = tally.drain();
          sending = batch;
          reserve();
          if (rowsOf(batch) === 0) {
            lastFailed = false;
            return;
          }
          xid = await within(beginFlush(conn));
          await within(addUsage(conn, batch));
          commitSent = true;
          await within(conn.query('COMMIT'));
          lastFailed = false;
        },
        { timers, onAbandon: (end) => (abandon = end) },
      );
    } catch (err) {
      const timedOut = err instanceof ConnectionDeadline;
      lastFailed = true;
      if (timedOut) flushFailures.timeout++;
      else flushFailures.failed++;
      sending = undefined;
      // The server's ERROR answer to COMMIT says it rolled back. No answer leaves it unknown, and so
      // does a FATAL or PANIC one: it ends the session or the server, maybe after the commit record
      // reached the WAL (recovery replays it), so the database is asked later, as for a lost answer.
      const doubtful =
        batch !== undefined && commitSent && !(err instanceof pg.DatabaseError && err.severity === 'ERROR');
      if (doubtful) doubts.push({ xid, batch: batch! });
      reserve();
      if (batch && !doubtful) tally.restore(batch);
      deps.log.warn(
        { err, pendingRows: status.pendingRows, ...(doubts.length > 0 ? { inDoubt: doubts.length } : {}) },
        timedOut
          ? 'usage statistics: flush timed out; its counts are kept for the next one'
          : 'usage statistics: flush failed; its counts are kept for the next one',
      );
    } finally {
      sending = undefined;
      reserve();
      abandon = undefined;
    }
  };

  const flush = (timeoutMs = flushTimeoutMs): Promise<void> => {
    inFlight ??= runFlush(timeoutMs).finally(() => {
      inFlight = undefined;
    });
    return inFlight;
  };

  let tick: TimerHandle | undefined;
  const schedule = () => {
    tick = timers.setTimeout(() => {
      reportDropped();
      void flush().finally(() => {
        if (!stopped) schedule();
      });
    }, deps.flushMs);
    (tick as { unref?: () => void }).unref?.();
  };
  schedule();

  const count = (ctx: RequestContext, o: RequestObservation) => {
    const principal = ctx.principal?.id ?? null;
    const now = deps.clock.wallMs();
    if (principal !== null) {
      // HTTP/1.1: at least a whole body's declared length, however its bytes fell between this
      // request's count and the connection's next. HTTP/2 counts the stream's own body bytes
      // exactly, and says `complete` of a reset stream too: its declared length is never taken there.
      const declaredUp = Number(ctx.req.headers['content-length']);
      const up =
        !isHttp2(ctx.req) && ctx.req.complete && Number.isSafeInteger(declaredUp)
          ? Math.max(declaredUp, o.bytesIn)
          : o.bytesIn;
      tally.request(principal, o.bytesOut, up, now);
    }
    // A download is an answer of 200 or 206 of which some body went out: a client gone before the
    // answer (499) or before its first body byte (a paced download still waiting) took nothing.
    // HTTP/1.1 sends the head with the first body bytes, so bytes out count them both.
    if (o.method !== 'GET' || (o.status !== 200 && o.status !== 206)) return;
    if (o.bytesOut === 0 && !ctx.res.writableFinished) return;
    let key: ArtifactKey | undefined;
    try {
      key = downloadedKey(o.route, ctx.params);
    } catch {
      return; // a name the route refused: no download happened
    }
    if (!key) return;
    // A finished response sent its Content-Length in body bytes; a cut one at most its wire bytes.
    const length = (ctx.res as { declaredLength?: number }).declaredLength;
    const bytes = ctx.res.writableFinished && length !== undefined ? length : o.bytesOut;
    tally.download(key, bytes, principal, now);
  };

  const status: UsageStatus = {
    get pendingRows() {
      return tally.size + asideRows();
    },
    dropped,
    flushFailures,
  };

  return {
    status,
    observe(ctx, o) {
      count(ctx, o);
      // Joins the flush in flight if there is one: what comes meanwhile waits in the tally.
      if (tally.size >= maxRows && !inFlight && !lastFailed && !stopped) void flush();
    },
    flush: () => flush(),
    async stop() {
      stopped = true;
      timers.clearTimeout(tick);
      const startedMs = deps.clock.monotonicMs();
      if (inFlight) {
        let waited: TimerHandle;
        const bound = new Promise<void>((resolve) => (waited = timers.setTimeout(resolve, STOP_BOUND_MS)));
        await Promise.race([inFlight, bound]);
        timers.clearTimeout(waited!);
        abandon?.();
        await inFlight;
      }
      const leftMs = STOP_BOUND_MS - (deps.clock.monotonicMs() - startedMs);
      if (leftMs > 0 && status.pendingRows > 0) await flush(Math.min(leftMs, flushTimeoutMs));
      reportDropped();
      if (status.pendingRows > 0) {
        const left = countsOf(tally.drain());
        const doubt = countsOf({
          artifacts: doubts.flatMap((d) => d.batch.artifacts),
          principalDays: doubts.flatMap((d) => d.batch.principalDays),
        });
        deps.log.error(
          {
            downloads: left.downloads + doubt.downloads,
            requests: left.requests + doubt.requests,
            ...(doubts.length > 0 ? { inDoubt: doubts.length } : {}),
          },
          'usage statistics: the last flush did not finish before the stop; these counts are not in the database',
        );
      }
    },
  };
}
