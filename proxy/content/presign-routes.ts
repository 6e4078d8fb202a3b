/**
 * `POST …/presign` (read access on the target): a link to the target's `/content` that needs no
 * header, for browsers, CDNs and download managers. GET/HEAD of that one path only, until it
 * expires, while the key that made it (and its grant, not removed since) stays valid and the path
 * holds the same bytes it held when the link was made. See docs/clients.md.
 */
import type { PresignedLinks } from '../../policy/auth/presigned-links.ts';
import { linkLifetime } from '../../policy/auth/presign-signature.ts';
import { ARTIFACT_KINDS, type Catalog } from '../../storage-adapter/catalog/catalog.ts';
import { StorageError } from '../../storage-adapter/errors.ts';
import { CONTENT_TEMPLATES, keyFromParams, pathOfKey } from './paths.ts';
import { GatewayError } from '../server/errors.ts';
import { sendJson } from '../server/http-errors.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { readJsonBody } from '../server/request-body.ts';
import { forwardedPrefix, requestScheme, type TrustedProxies } from '../router/forwarded.ts';

/** Lifetime of a link whose request names none. */
export const DEFAULT_LINK_SECONDS = 3600;

/**
 * The origin the client used: Host (kept by the router), or over HTTP/2 `:authority`, which stands
 * for it there (curl and browsers send no Host), and the scheme it arrived with (`requestScheme`:
 * this listener's, or what a trusted proxy in front says, never the client).
 */
function requestOrigin(ctx: RequestContext, trusted: TrustedProxies): string {
  const authority = ctx.req.headers[':authority'];
  const host = ctx.req.headers.host ?? (typeof authority === 'string' ? authority : undefined);
  const proto = requestScheme(ctx.req, trusted).scheme;
  return host && /^[A-Za-z0-9.:[\]-]{1,255}$/.test(host) ? `${proto}://${host}` : '';
}

export function presignRoutes(deps: {
  links: PresignedLinks;
  catalog: Catalog;
  maxExpiresSeconds: number;
  /** ARKVORY_TRUSTED_PROXIES: only they say the client's scheme and the path prefix they publish us under. */
  trusted: TrustedProxies;
}): Route[] {
  return ARTIFACT_KINDS.map((kind) => ({
    methods: ['POST'],
    template: `${CONTENT_TEMPLATES[kind]}/presign`,
    access: 'read',
    // A link is a signature over what the principal may read already: nothing stored changes.
    audit: null,
    async handle(ctx) {
      const key = keyFromParams(kind, ctx.params);
      const body = await readJsonBody(ctx.req);
      const lifetime = linkLifetime(body.expiresInSeconds, DEFAULT_LINK_SECONDS, deps.maxExpiresSeconds);
      if (!lifetime.ok) throw new GatewayError('invalid_request', lifetime.problem);
      const entry = await deps.catalog.get(key);
      if (!entry) throw new StorageError('not_found', 'No such artifact.');
      // Bound to these bytes: once the name holds others, the link answers 410 link_content_changed.
      const link = await deps.links.issue(
        ctx.principal!,
        `${pathOfKey(key)}/content`,
        entry.sha256,
        lifetime.seconds,
        key.repository,
      );
      // A trusted proxy's path prefix goes in the URL only: the signature covers the path this
      // gateway sees (and checks), which the proxy reaches by stripping the prefix again.
      sendJson(ctx.res, 201, {
        url: `${requestOrigin(ctx, deps.trusted)}${forwardedPrefix(ctx.req, deps.trusted)}${link.pathAndQuery}`,
        path: link.pathAndQuery,
        expiresAt: link.expiresAt.toISOString(),
        methods: ['GET', 'HEAD'],
      });
    },
  }));
}
