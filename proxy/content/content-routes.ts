/**
 * Byte routes: `GET|HEAD …/content` streams a published blob with Range and conditional support;
 * `PUT` on the base path uploads (streamed, hashed, atomically published, immutable). `GET|HEAD
 * …/packages/{name}/{version}/apt/{file}` streams the asset `{file}` the same way (apt's flat layout).
 */
import { publicBase, type PublicBaseOptions } from '../server/public-base.ts';
import { randomBytes } from 'node:crypto';
import type {
  ArtifactKey,
  ArtifactKind,
  Catalog,
  CatalogEntry,
  PublishAuthority,
} from '../../storage-adapter/catalog/catalog.ts';
import type { ByteMeter } from '../../storage-adapter/byte-meter.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import type { ArtifactStore, BlobReader } from '../../storage-adapter/store.ts';
import { publishArtifact } from '../../storage-adapter/catalog/publish.ts';
import { refuseContentCoding, refuseTransferCoding } from './content-coding.ts';
import { parseContentDigestSha256 } from './digest.ts';
import { isMediaType } from './media-type.ts';
import { metadataOf } from './metadata.ts';
import { APT_TEMPLATE, aptAssetKey, CONTENT_TEMPLATES, keyFromParams, pathOfKey } from './paths.ts';
import { evaluateWritePreconditions } from './conditional.ts';
import { type ContentPlan, planContentResponse, writeValidatorsOf } from './response.ts';
import { sendSegments } from './stream.ts';
import { PolicyError } from '../../policy/errors.ts';
import { staleCredential } from '../../policy/auth/authenticator.ts';
import type { StorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { UploadQuota } from '../../policy/quota/upload-quota.ts';
import { GatewayError } from '../server/errors.ts';
import { ClientBody } from '../store-health/client-body.ts';
import { sendError, sendJson } from '../server/http-errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';

export interface ContentMeters {
  /**
   * The download meter for this request, or undefined to stream unthrottled; a promise when it
   * waits for the instance's answer (a repository's transfer bound asked of the coordinating process).
   */
  download?(ctx: RequestContext): ByteMeter | undefined | Promise<ByteMeter | undefined>;
  upload?(ctx: RequestContext): ByteMeter | undefined | Promise<ByteMeter | undefined>;
}

export interface ContentDeps {
  readonly store: ArtifactStore;
  readonly catalog: Catalog;
  readonly maxUploadBytes: number;
  readonly meters?: ContentMeters | undefined;
  /** Storage quotas (writer); absent → none checked. */
  readonly quotas?: StorageQuotas | undefined;
  /**
   * Authorizes the request again as its gates did before its body (throws their 401, 403 or 404):
   * an upload's bytes are published only if its key, principal and grant still allow it then.
   * Absent → not asked again.
   */
  readonly reauthorize?: ((ctx: RequestContext) => undefined | Promise<void>) | undefined;
  /** Where clients reach the gateway: the path prefix of an upload's Location and `contentUrl`; absent → none. */
  readonly base?: PublicBaseOptions | undefined;
}

const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

/**
 * Fields a request may repeat as one list (RFC 9110 §5.3), of which Node keeps only the first in
 * `req.headers`: If-Modified-Since and If-Unmodified-Since over HTTP/1.1, and all of these over
 * HTTP/2. Read whole from the raw headers instead: two dates are no HTTP-date, so ignored as §13.1.3
 * and §13.1.4 require (not the first one evaluated), and a second `If-None-Match` on a `DELETE`
 * still refuses it when it names the current version.
 */
const LIST_FIELDS: ReadonlySet<string> = new Set([
  'if-match',
  'if-none-match',
  'if-modified-since',
  'if-unmodified-since',
  'if-range',
  'range',
]);

export function header(ctx: RequestContext, name: string): string | undefined {
  const field = ctx.req.headers[name];
  const value = Array.isArray(field) ? field.join(', ') : field;
  // Most requests carry none of these: only a field that is there costs a pass over the raw ones.
  if (value === undefined || !LIST_FIELDS.has(name)) return value;
  const raw = ctx.req.rawHeaders;
  const values: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) values.push(raw[i + 1]!);
  return values.length > 1 ? values.join(', ') : value;
}

/**
 * The request's PUT/DELETE preconditions as a check of the name's current version (throws 412
 * `precondition_failed`), or undefined when it sends none.
 */
export function writePreconditions(ctx: RequestContext): ((current: CatalogEntry | undefined) => void) | undefined {
  const headers = {
    ifMatch: header(ctx, 'if-match'),
    ifUnmodifiedSince: header(ctx, 'if-unmodified-since'),
    ifNoneMatch: header(ctx, 'if-none-match'),
  };
  if (headers.ifMatch === undefined && headers.ifUnmodifiedSince === undefined && headers.ifNoneMatch === undefined)
    return undefined;
  return (current) => {
    if (
      evaluateWritePreconditions(headers, current && writeValidatorsOf(current), Date.now()) === 'precondition_failed'
    )
      throw new StorageError('precondition_failed');
  };
}

export function readOnlyError(): GatewayError {
  return new GatewayError('read_only', undefined, { headers: { allow: 'GET, HEAD' } });
}

async function loadEntry(catalog: Catalog, key: ArtifactKey): Promise<CatalogEntry> {
  const entry = await catalog.get(key);
  if (!entry) throw new StorageError('not_found', 'No such artifact.');
  return entry;
}

type KeyOf = (params: Readonly<Record<string, string>>) => ArtifactKey;

const DONE: Promise<void> = Promise.resolve();

/**
 * A hot small object is answered without waiting on anything but the socket: the entry and the
 * blob come from memory when the caches hold them, so no promise is made until the response ends.
 */
function serveContent(deps: ContentDeps, keyOf: KeyOf, ctx: RequestContext): Promise<void> {
  const key = keyOf(ctx.params);
  const entry = deps.catalog.peek?.(key);
  if (entry) return respond(deps, ctx, entry);
  return loadEntry(deps.catalog, key).then((e) => respond(deps, ctx, e));
}

function respond(deps: ContentDeps, ctx: RequestContext, entry: CatalogEntry): Promise<void> {
  const { res } = ctx;
  // A pre-signed link serves the bytes it was made for, not whatever the name holds now.
  if (ctx.linkSha256 !== undefined && ctx.linkSha256 !== entry.sha256) throw new PolicyError('link_content_changed');
  const plan = planContentResponse(
    entry,
    {
      // RFC 9110 §14.2: GET is the only method range handling is defined for, and a server MUST
      // ignore Range on any other: a HEAD answers the whole representation's 200 head.
      range: ctx.req.method === 'GET' ? header(ctx, 'range') : undefined,
      ifRange: header(ctx, 'if-range'),
      ifMatch: header(ctx, 'if-match'),
      ifUnmodifiedSince: header(ctx, 'if-unmodified-since'),
      ifNoneMatch: header(ctx, 'if-none-match'),
      ifModifiedSince: header(ctx, 'if-modified-since'),
    },
    () => `arkvory-${randomBytes(12).toString('hex')}`,
    // The clock Node dates the answer by (its Date header).
    Date.now(),
  );
  if (plan.status === 304) {
    res.writeHead(304, plan.headers);
    res.end();
    return DONE;
  }
  if (plan.status === 412) {
    sendError(res, new StorageError('precondition_failed', undefined, { headers: plan.headers }), ctx.log);
    return DONE;
  }
  if (plan.status === 416) {
    sendError(res, new StorageError('range_not_satisfiable', undefined, { headers: plan.headers }), ctx.log);
    return DONE;
  }
  const cached = deps.store.cachedBlob?.(entry.sha256);
  if (cached) return send(deps, ctx, entry, plan, cached);
  // Open before the status line goes out, so a missing or damaged blob is still a clean 500 and an
  // unreachable static-HTTP store a clean 502/504 (its first range request is made here).
  const ranges = ctx.req.method === 'HEAD' ? [] : plan.segments.flatMap((s) => (s.kind === 'range' ? [s.range] : []));
  return deps.store.openBlob(entry.sha256, ranges).then(
    (blob) => send(deps, ctx, entry, plan, blob),
    (err: unknown) => {
      const code = (err as { code?: string }).code;
      if (
        code === 'upstream_unreachable' ||
        code === 'upstream_timeout' ||
        code === 'storage_full' ||
        code === 'slice_digest_mismatch' ||
        code === 'store_unreachable'
      )
        throw err;
      throw new Error(`catalog row ${pathOfKey(entry)} points at blob ${entry.sha256} which cannot be opened`, {
        cause: err,
      });
    },
  );
}

/** Sends the planned answer from an open blob, and closes it however that ends. */
function send(
  deps: ContentDeps,
  ctx: RequestContext,
  entry: CatalogEntry,
  plan: ContentPlan & { status: 200 | 206 },
  blob: BlobReader,
): Promise<void> {
  let sent: Promise<void>;
  try {
    if (blob.sizeBytes !== entry.sizeBytes)
      throw new Error(`blob ${entry.sha256} has ${blob.sizeBytes} bytes, the catalog says ${entry.sizeBytes}`);
    // The meter before the head: it may refuse (429 busy: a repository's transfer bound, a full
    // principal table), which must still be answerable.
    const meter = ctx.req.method === 'HEAD' ? undefined : deps.meters?.download?.(ctx);
    sent =
      meter instanceof Promise
        ? meter.then((granted) => sendHeadAndBody(ctx, plan, blob, granted))
        : sendHeadAndBody(ctx, plan, blob, meter);
  } catch (err) {
    sent = Promise.reject(err);
  }
  return sent.finally(() => blob.close());
}

function sendHeadAndBody(
  ctx: RequestContext,
  plan: ContentPlan & { status: 200 | 206 },
  blob: BlobReader,
  meter: ByteMeter | undefined,
): Promise<void> {
  // The head goes with the first body byte read (stream.ts), so a failed first read is still a 500.
  if (ctx.req.method !== 'HEAD')
    return sendSegments(ctx.res, blob, plan.segments, meter, ctx, () => ctx.res.writeHead(plan.status, plan.headers));
  ctx.res.writeHead(plan.status, plan.headers);
  ctx.res.end();
  return DONE;
}

function declaredLength(ctx: RequestContext): number | undefined {
  const raw = header(ctx, 'content-length');
  if (raw === undefined) return undefined;
  if (!/^[0-9]{1,16}$/.test(raw)) throw new GatewayError('invalid_request', 'Content-Length is not a number.');
  return Number(raw);
}

function declaredContentType(ctx: RequestContext): string {
  const raw = header(ctx, 'content-type')?.trim();
  if (raw === undefined || raw === '') return DEFAULT_CONTENT_TYPE;
  if (!isMediaType(raw)) throw new GatewayError('invalid_request', 'Content-Type is not a valid media type.');
  return raw;
}

async function upload(deps: ContentDeps, kind: ArtifactKind, ctx: RequestContext): Promise<void> {
  const { req, res } = ctx;
  let quota: UploadQuota | undefined;
  try {
    if (!deps.store.writable) throw readOnlyError();
    const key = keyFromParams(kind, ctx.params);
    const length = declaredLength(ctx);
    if (length !== undefined && length > deps.maxUploadBytes) {
      throw new StorageError(
        'payload_too_large',
        `The upload is larger than the limit of ${deps.maxUploadBytes} bytes.`,
      );
    }
    refuseContentCoding(ctx.req.headers['content-encoding']);
    refuseTransferCoding(ctx.req.headers['transfer-encoding']);
    const expectedSha256 = parseContentDigestSha256(header(ctx, 'content-digest'));
    const contentType = declaredContentType(ctx);
    // Before 100 Continue: a precondition that fails costs no body byte.
    const precondition = writePreconditions(ctx);
    precondition?.(await deps.catalog.get(key));
    // Before 100 Continue: a declared size that does not fit is refused before a body byte is read,
    // unless the body may be bytes the quotas already count (then it is admitted by its digest).
    const held =
      deps.quotas &&
      (await UploadQuota.open(deps.quotas, {
        repository: key.repository,
        principalId: ctx.principal?.id ?? null,
        declaredBytes: length,
        declaredSha256: expectedSha256,
        current: () => deps.catalog.get(key),
      }));
    quota = held;
    // Before 100 Continue too: a repository's transfer bound may refuse the upload (429 busy).
    const metered = deps.meters?.upload?.(ctx);
    const meter = metered instanceof Promise ? await metered : metered;
    ctx.continueBody();
    // The body's failures are the client's, not the store's (client-body.ts).
    const body = new ClientBody(
      req,
      held?.metering && length === undefined ? held.meter(req.iterator({ destroyOnReturn: false })) : undefined,
    );
    const result = await publishArtifact(deps, {
      key,
      body,
      // A body may run for hours: a key revoked, a principal disabled or a grant removed meanwhile
      // (within 2 s on every gateway for new requests) also refuses the bytes still on their way,
      // bytes already published under the name included; and once more in the catalog insert itself,
      // after the bytes are committed (a long S3 copy), so a revocation during that is seen too.
      authorize: deps.reauthorize ? async () => deps.reauthorize?.(ctx) : undefined,
      authority: deps.reauthorize ? publishAuthority(ctx) : undefined,
      admit: held ? (staged) => held.admit(staged) : undefined,
      // Not ours: the row was there all along (or a concurrent publisher's won), and holds for it too
      // (If-None-Match: * from two clients at once gives one 201 and one 412, whatever the bytes).
      precondition,
      contentType,
      publishedBy: ctx.principal?.id ?? null,
      stage: {
        maxBytes: deps.maxUploadBytes,
        expectedLength: length,
        expectedSha256,
        signal: ctx.signal,
        meter,
        // Each chunk is the parser's fresh allocation and nothing here reads it again.
        chunksOwned: true,
      },
    });
    const status = result.outcome === 'created' ? 201 : 200;
    ctx.auditDetails = { outcome: result.outcome, sha256: result.entry.sha256, sizeBytes: result.entry.sizeBytes };
    const headers: Record<string, string> = { etag: `"${result.entry.sha256}"` };
    const prefix = deps.base ? publicBase(req, deps.base).prefix : '';
    if (status === 201) headers.location = `${prefix}${pathOfKey(result.entry)}`;
    sendJson(res, status, metadataOf(result.entry, prefix), headers);
  } catch (err) {
    // The rest of the body is unread: close the connection after the answer instead of draining it.
    if (!req.complete && !res.headersSent) res.setHeader('connection', 'close');
    throw err;
  } finally {
    // Settled by the publish already, or given back now; if PostgreSQL fails here it expires by itself.
    await quota?.release().catch((err: unknown) => ctx.log.warn({ err }, 'quota reservation not released'));
  }
}

/**
 * What the catalog insert checks of an upload's sender (catalog.ts `PublishAuthority`): its key (none
 * for a client certificate, whose binding the auth gate asked again just before), its principal as
 * authenticated. Refusals are the auth gate's: the key was genuine, so a 401 is a stale credential's.
 */
function publishAuthority(ctx: RequestContext): PublishAuthority | undefined {
  const principal = ctx.principal;
  if (!principal) return undefined;
  return {
    kind: 'request',
    principalId: principal.id,
    keyId: principal.keyId.startsWith('cert:') ? undefined : principal.keyId,
    disabledAtMs: principal.disabledAtMs,
    refuse: (verdict) => (verdict === 'unauthorized' ? staleCredential() : new PolicyError(verdict)),
  };
}

export function contentRoutes(deps: ContentDeps): Route[] {
  const routes: Route[] = [];
  for (const kind of ['artifact', 'package', 'asset'] as const) {
    routes.push(
      {
        methods: ['GET', 'HEAD'],
        template: `${CONTENT_TEMPLATES[kind]}/content`,
        access: 'read',
        downloads: true,
        handle: (ctx) => serveContent(deps, (params) => keyFromParams(kind, params), ctx),
      },
      // 100 Continue only after the size check (and the gates and admission before it).
      {
        methods: ['PUT'],
        template: CONTENT_TEMPLATES[kind],
        access: 'write',
        continuesBodyItself: true,
        audit: 'artifact.publish',
        handle: (ctx) => upload(deps, kind, ctx),
      },
    );
  }
  // The same handler, so the same auth, limits, admission, pacing, Range and caches as `…/content`.
  routes.push({
    methods: ['GET', 'HEAD'],
    template: APT_TEMPLATE,
    access: 'read',
    downloads: true,
    handle: (ctx) => serveContent(deps, aptAssetKey, ctx),
  });
  return routes;
}
