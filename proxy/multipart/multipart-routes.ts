/**
 * Multipart uploads on the writer: open a session on a target path, PUT parts (each paced and
 * admitted like a full upload), complete with the ordered part list (202 and a job the completion
 * worker runs), poll the session, or abort it. Only the principal that opened a session sees it.
 */
import type pg from 'pg';
import { ARTIFACT_KINDS } from '../../storage-adapter/catalog/catalog.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import type { SessionScope, UploadSession, UploadSessions } from '../../storage-adapter/multipart/sessions.ts';
import type { QuotaReservation, StorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { refuseContentCoding, refuseTransferCoding } from '../content/content-coding.ts';
import { isMediaType, MAX_MEDIA_TYPE_LENGTH } from '../content/media-type.ts';
import { CONTENT_TEMPLATES, keyFromParams, pathOfKey } from '../content/paths.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { readJsonBody } from '../server/request-body.ts';
import { ClientBody } from '../store-health/client-body.ts';
import type { ContentMeters } from '../content/content-routes.ts';
import { publicBase, type PublicBaseOptions } from '../server/public-base.ts';

const SESSION = '/api/v1/repositories/:repo/uploads/:upload';

/**
 * A session as answered. Its `url` (also the Location of a start and a completion) and the
 * artifact's `contentUrl` are paths on the client's origin, under the path prefix it reaches the
 * gateway by (ARKVORY_PUBLIC_URL's, or a trusted proxy's X-Forwarded-Prefix): `arkvory put` joins
 * `url` to the origin it was given, so a session opened through a proxy at /arkvory/ is sent its
 * parts there too.
 */
function sessionBody(s: UploadSession, prefix: string): Record<string, unknown> {
  return {
    upload: s.id,
    state: s.state,
    target: pathOfKey(s.key),
    contentType: s.contentType,
    expectedSize: s.expectedSize,
    expectedSha256: s.expectedSha256,
    parts: s.parts,
    createdAt: s.createdAt,
    expiresAt: s.expiresAt,
    error: s.error,
    artifact:
      s.state === 'done'
        ? { sha256: s.resultSha256, sizeBytes: s.resultSize, contentUrl: `${prefix}${pathOfKey(s.key)}/content` }
        : null,
    url: `${prefix}/api/v1/repositories/${encodeURIComponent(s.key.repository)}/uploads/${s.id}`,
  };
}

/** A session is its opener's: another principal, even a writer of the repository, gets 404. */
function scopeOf(ctx: RequestContext): SessionScope {
  return { repository: ctx.params.repo!, principalId: ctx.principal?.id ?? null };
}

function declaredLength(ctx: RequestContext): number | undefined {
  const raw = ctx.req.headers['content-length'];
  if (raw === undefined) return undefined;
  if (!/^[0-9]{1,16}$/.test(raw)) throw new GatewayError('invalid_request', 'Content-Length is not a number.');
  return Number(raw);
}

export function multipartRoutes(deps: {
  sessions: UploadSessions;
  maxPartBytes: number;
  writable: boolean;
  meters?: ContentMeters;
  /** Storage quotas: parts are reserved as they arrive, a declared size checked at start; absent → none checked. */
  quotas?: StorageQuotas | undefined;
  /** Where clients reach the gateway: the path prefix of the session URLs answered. */
  base: PublicBaseOptions;
}): Route[] {
  const { sessions } = deps;
  const prefixOf = (ctx: RequestContext) => publicBase(ctx.req, deps.base).prefix;
  const writable = <T>(f: T): T => {
    if (!deps.writable) throw new GatewayError('read_only', undefined, { headers: { allow: 'GET, HEAD' } });
    return f;
  };
  const routes: Route[] = ARTIFACT_KINDS.map((kind) => ({
    methods: ['POST'],
    template: `${CONTENT_TEMPLATES[kind]}/uploads`,
    access: 'write',
    // Sessions and parts are steps of a publish: the completion is the audited action.
    audit: null,
    async handle(ctx) {
      writable(null);
      const key = keyFromParams(kind, ctx.params);
      const body = await readJsonBody(ctx.req);
      const size = body.size;
      const sha256 = body.sha256;
      const contentType = body.contentType ?? 'application/octet-stream';
      if (size !== undefined && (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0))
        throw new StorageError('invalid_request', 'size must be a non-negative integer');
      if (sha256 !== undefined && (typeof sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(sha256)))
        throw new StorageError('invalid_request', 'sha256 must be 64 lowercase hex characters');
      // As a whole upload's Content-Type: the artifact is served with it either way.
      if (typeof contentType !== 'string' || !isMediaType(contentType))
        throw new StorageError(
          'invalid_request',
          `contentType must be a media type such as application/octet-stream, at most ${MAX_MEDIA_TYPE_LENGTH} characters`,
        );
      const principalId = ctx.principal?.id ?? null;
      // A declared size that does not fit now is refused up front; nothing is held for it: the
      // session holds what its parts hold (below), so a session that sends nothing holds nothing.
      if (size !== undefined)
        await deps.quotas?.check({ repository: key.repository, principalId, bytes: size as number });
      const session = await sessions.create(key, {
        contentType,
        ...(size !== undefined ? { expectedSize: size as number } : {}),
        ...(sha256 !== undefined ? { expectedSha256: sha256 as string } : {}),
        principalId,
      });
      const out = sessionBody(session, prefixOf(ctx));
      sendJson(ctx.res, 201, out, { location: out.url as string });
    },
  }));
  routes.push(
    {
      methods: ['GET'],
      template: SESSION,
      access: 'write',
      async handle(ctx) {
        sendJson(ctx.res, 200, sessionBody(await sessions.get(scopeOf(ctx), ctx.params.upload!), prefixOf(ctx)));
      },
    },
    {
      methods: ['DELETE'],
      template: SESSION,
      access: 'write',
      audit: null,
      async handle(ctx) {
        writable(null);
        const upload = ctx.params.upload!;
        const quotas = deps.quotas;
        // Its quota hold ends in the abort's own transaction: an abort never leaves its bytes held.
        await sessions.abort(scopeOf(ctx), upload, quotas ? { ended: (client) => quotas.release(upload, client) } : {});
        ctx.res.writeHead(204).end();
      },
    },
    {
      methods: ['PUT'],
      template: `${SESSION}/parts/:part`,
      access: 'write',
      audit: null,
      continuesBodyItself: true,
      async handle(ctx) {
        writable(null);
        const partNumber = /^[0-9]{1,5}$/.test(ctx.params.part!) ? Number(ctx.params.part) : Number.NaN;
        const length = declaredLength(ctx);
        refuseContentCoding(ctx.req.headers['content-encoding']);
        refuseTransferCoding(ctx.req.headers['transfer-encoding']);
        if (length !== undefined && length > deps.maxPartBytes)
          throw new StorageError('payload_too_large', `A part may hold at most ${deps.maxPartBytes} bytes.`);
        const scope = scopeOf(ctx);
        const upload = ctx.params.upload!;
        let reservation: QuotaReservation | undefined;
        try {
          // A part's bytes are reserved as a PUT's are: refused before its body past a quota,
          // grown step by step while a chunked one arrives. They move to the session's reservation
          // in the transaction that records the part (a completion listing it may be queued as soon
          // as that commits), which its completion settles and its end gives back. A part sent
          // again replaces the one the session holds: only what it adds is reserved, and only
          // that is added to the session's hold (what was checked against the quotas). The session
          // is checked first: a part to one that has ended is told so, never `quota_exceeded`.
          const quotas = deps.quotas;
          const replaced = quotas ? await sessions.replaceablePartSize(scope, upload, partNumber) : 0;
          const adds = (bytes: number) => Math.max(0, bytes - replaced);
          reservation = await quotas?.reserve({ ...scope, bytes: adds(length ?? 0) });
          const ensure = reservation?.ensure;
          const metered = deps.meters?.upload?.(ctx);
          const meter = metered instanceof Promise ? await metered : metered;
          // 100 Continue only once the session is the sender's, open, and has room for the part.
          const part = await sessions.putPart(scope, upload, partNumber, new ClientBody(ctx.req), {
            maxBytes: deps.maxPartBytes,
            beforeBody: () => ctx.continueBody(),
            ...(length !== undefined ? { expectedLength: length } : {}),
            ...(meter ? { meter } : {}),
            ...(ensure && quotas
              ? {
                  reserve: (bytes: number) => ensure(adds(bytes)),
                  recorded: (client, sizeBytes) => quotas.holdSessionParts(upload, scope, adds(sizeBytes), client),
                  replacedBytes: replaced,
                }
              : {}),
            signal: ctx.signal,
          });
          // Before the answer: the client's next request sees the bytes once.
          await reservation?.release();
          sendJson(ctx.res, 200, part, { etag: `"${part.sha256}"` });
        } catch (err) {
          if (!ctx.req.complete && !ctx.res.headersSent) ctx.res.setHeader('connection', 'close');
          throw err;
        } finally {
          await reservation?.release();
        }
      },
    },
    {
      methods: ['POST'],
      template: `${SESSION}/complete`,
      access: 'write',
      audit: 'artifact.publish',
      async handle(ctx) {
        writable(null);
        const body = await readJsonBody(ctx.req, 2 * 1024 * 1024);
        const upload = ctx.params.upload!;
        const quotas = deps.quotas;
        // The session's quota hold counts from the queuing of its completion until the worker ends
        // it, however long it waits: ended at the session's expiry, its room could go to another
        // upload while the completion is still to publish (and then fails for want of it).
        // Recorded once the job is queued: a failure after it (the notice to the worker, the read of
        // the session for the answer) answers an error, but the artifact is on its way all the same.
        const job = await sessions.complete(scopeOf(ctx), upload, body.parts, {
          ...(quotas ? { queued: (client: pg.PoolClient) => quotas.holdUntilCompleted(upload, client) } : {}),
          committed: (queued) => {
            ctx.actionTaken = true;
            ctx.auditDetails = {
              outcome: 'completing',
              upload,
              job: queued.jobId,
              sizeBytes: queued.totalBytes,
              // The same completion asked for again (its first answer lost): nothing more was queued.
              ...(queued.again ? { again: true } : {}),
            };
          },
        });
        const out = sessionBody(await sessions.get(scopeOf(ctx), upload), prefixOf(ctx));
        sendJson(ctx.res, 202, { ...out, job: job.jobId, totalBytes: job.totalBytes }, { location: out.url as string });
      },
    },
  );
  return routes;
}
