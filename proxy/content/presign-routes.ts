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
import type { Route } from '../server/route-types.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import { publicBase } from '../server/public-base.ts';

/** Lifetime of a link whose request names none. */
export const DEFAULT_LINK_SECONDS = 3600;

export function presignRoutes(deps: {
  links: PresignedLinks;
  catalog: Catalog;
  maxExpiresSeconds: number;
  /** ARKVORY_TRUSTED_PROXIES: only they say the client's host, scheme and the path prefix they publish us under. */
  trusted: TrustedProxies;
  /** ARKVORY_PUBLIC_URL: where clients reach the gateways, whatever a request says; undefined: from each request. */
  publicUrl?: string | undefined;
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
      // The origin and a path prefix (ARKVORY_PUBLIC_URL's, or a trusted proxy's) go in the URL
      // only: the signature covers the path this gateway sees (and checks), which the proxy reaches
      // by stripping the prefix again.
      const base = publicBase(ctx.req, deps);
      sendJson(ctx.res, 201, {
        url: `${base.origin}${base.prefix}${link.pathAndQuery}`,
        path: link.pathAndQuery,
        expiresAt: link.expiresAt.toISOString(),
        methods: ['GET', 'HEAD'],
      });
    },
  }));
}
