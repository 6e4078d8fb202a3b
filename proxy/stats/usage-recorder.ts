/**
 * Usage statistics on a gateway: each request's principal and bytes, and each download (an answer
 * of which some body went out), counted in memory (usage-tally.ts) and added to the database every
 * flush interval in one batch, and once more on a graceful stop. A crash (kill -9) loses at most
 * what was counted since the last flush: one ARKVORY_USAGE_STATS_FLUSH_SECONDS
 * (docs/observability.md). Past MAX_ROWS distinct rows a flush starts early; a batch whose flush
 * failed is kept for the next one, up to twice that, beyond which it is dropped with an error line.
 */
import { isHttp2 } from '../server/http2-messages.ts';
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Clock } from '../../policy/clock.ts';
import type { ArtifactKey, ArtifactKind } from '../../storage-adapter/catalog/catalog.ts';
import { APT_TEMPLATE, aptAssetKey, CONTENT_TEMPLATES, keyFromParams } from '../content/paths.ts';
import type { RequestContext, RequestObservation } from '../server/route-types.ts';
import { addUsage } from './usage-store.ts';
import { UsageTally } from './usage-tally.ts';

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
  /** Adds what was counted to the database now. */
  flush(): Promise<void>;
  /** The last flush; no more timer. */
  stop(): Promise<void>;
}

export function startUsageRecorder(deps: { pool: pg.Pool; log: Logger; clock: Clock; flushMs: number }): UsageRecorder {
  const tally = new UsageTally();

  const flushOnce = async () => {
    const batch = tally.drain();
    if (batch.artifacts.length === 0 && batch.principalDays.length === 0) return;
    try {
      await addUsage(deps.pool, batch);
    } catch (err) {
      if (tally.size + batch.artifacts.length + batch.principalDays.length <= 2 * MAX_ROWS) {
        tally.restore(batch);
        deps.log.warn({ err }, 'usage statistics: flush failed; kept for the next one');
      } else
        deps.log.error(
          { err, artifacts: batch.artifacts.length, principalDays: batch.principalDays.length },
          'usage statistics: flush failed and the backlog is full; this batch is dropped',
        );
    }
  };
  // One flush at a time: a call during one runs after it, with what came since (flushOnce never throws).
  let chain: Promise<void> = Promise.resolve();
  const flush = (): Promise<void> => {
    chain = chain.then(flushOnce);
    return chain;
  };
  const timer = setInterval(() => void flush(), deps.flushMs);
  timer.unref();

  return {
    observe(ctx, o) {
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
      if (tally.size >= MAX_ROWS) void flush();
    },
    flush,
    async stop() {
      clearInterval(timer);
      await flush();
    },
  };
}
