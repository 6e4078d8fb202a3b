import { AdminStore, checkKeyLifetime, parseScopes } from '../../policy/auth/admin-store.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { PageRequest } from '../../policy/auth/page.ts';
import type { AuditAction } from '../audit/audit-event.ts';
import { certificateDetails, grantDetails, keyDetails, principalDetails } from '../audit/admin-details.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { sendJson } from '../server/http-errors.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { Services } from '../server/services.ts';

const BASE = '/api/v1/admin';

/** `?limit=&cursor=` of a listing (policy/auth/page.ts checks them). */
export function pageQuery(url: URL): PageRequest {
  return { limit: url.searchParams.get('limit') ?? undefined, cursor: url.searchParams.get('cursor') ?? undefined };
}

function requiredString(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new PolicyError('invalid_request', `${name} is required`);
  return value;
}

/** A field that may be left out, but when given must be a string (null or another type is a mistake, not "unset"). */
function optionalString(body: Record<string, unknown>, name: string): string | undefined {
  if (!(name in body)) return undefined;
  const value = body[name];
  if (typeof value !== 'string') throw new PolicyError('invalid_request', `${name} must be a string when given`);
  return value;
}

/** `/api/v1/admin/…`: principals, keys, repositories, grants. Every route needs the admin scope. */
export function authAdminRoutes(services: Services): Route[] {
  const store = new AdminStore(services.pool);
  const publishers = services.config.rateLimitBypassPublishers;
  /**
   * The principals that may publish rate-limit bypass rules (ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS,
   * by name) get their names, keys and certificates from the CLI only: any admin key could
   * otherwise mint a key for one (or create one by that name) and so publish bypass rules itself.
   */
  const refusePublisher = (name: string): void => {
    if (publishers.includes(name))
      throw new PolicyError(
        'forbidden',
        `"${name}" may publish rate-limit bypass rules (ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS): its keys and certificates are managed with the CLI only`,
      );
  };
  const refusePublisherRef = async (ref: string): Promise<void> =>
    refusePublisher((await store.findPrincipal(ref)).name);
  const admin = (methods: Route['methods'], template: string, handle: Route['handle'], audit?: AuditAction): Route => ({
    methods,
    template: `${BASE}${template}`,
    access: 'admin',
    handle,
    ...(audit ? { audit } : {}),
  });
  /** Answers `body` and records `details` with the route's audit action. */
  const done = (ctx: RequestContext, status: number, body: object, details: Record<string, unknown>) => {
    ctx.auditDetails = details;
    sendJson(ctx.res, status, body);
  };
  return [
    admin(['GET'], '/principals', async ({ res, url }) => {
      const page = await store.listPrincipals(pageQuery(url));
      sendJson(res, 200, { principals: page.items, nextCursor: page.nextCursor });
    }),
    admin(
      ['POST'],
      '/principals',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const name = requiredString(body.name, 'name');
        refusePublisher(name);
        const created = await store.createPrincipal(name);
        done(ctx, 201, created, principalDetails(created));
      },
      'principal.create',
    ),
    admin(['GET'], '/principals/:principal', async ({ res, params }) =>
      sendJson(res, 200, await store.findPrincipal(params.principal!)),
    ),
    admin(
      ['POST'],
      '/principals/:principal/disable',
      async (ctx) => {
        // Disabling oneself over HTTP ends one's own access at once (and the last admin's, everyone's):
        // another admin, or the CLI, does it.
        const target = await store.findPrincipal(ctx.params.principal!);
        if (target.id === ctx.principal?.id)
          throw new PolicyError(
            'conflict',
            'a principal cannot disable itself over HTTP; another admin or `arkvory principals disable` can',
          );
        const row = await store.setPrincipalDisabled(target.id, true);
        done(ctx, 200, row, principalDetails(row));
      },
      'principal.disable',
    ),
    admin(
      ['POST'],
      '/principals/:principal/enable',
      async (ctx) => {
        const row = await store.setPrincipalDisabled(ctx.params.principal!, false);
        done(ctx, 200, row, principalDetails(row));
      },
      'principal.enable',
    ),
    admin(
      ['PUT'],
      '/principals/:principal/bandwidth-weight',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const row = await store.setPrincipalWeight(ctx.params.principal!, body.bandwidthWeight);
        done(ctx, 200, row, { bandwidthWeight: row.bandwidthWeight });
      },
      'principal.weight',
    ),
    admin(['GET'], '/principals/:principal/keys', async ({ res, params, url }) => {
      const page = await store.listKeys(params.principal!, pageQuery(url));
      sendJson(res, 200, { keys: page.items, nextCursor: page.nextCursor });
    }),
    admin(
      ['POST'],
      '/principals/:principal/keys',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const expiresInSeconds = checkKeyLifetime(body.expiresInSeconds);
        // A kind or description of the wrong type is refused, never quietly read as left out.
        const kind = optionalString(body, 'kind');
        const description = optionalString(body, 'description');
        await refusePublisherRef(ctx.params.principal!);
        const created = await store.createKey(ctx.params.principal!, {
          scopes: parseScopes(body.scopes ?? ['read']),
          ...(expiresInSeconds ? { expiresInSeconds } : {}),
          ...(kind !== undefined ? { kind: kind as 'service' | 'personal' } : {}),
          ...(description !== undefined ? { description } : {}),
        });
        done(ctx, 201, created, keyDetails(created));
      },
      'key.create',
    ),
    admin(['GET'], '/principals/:principal/certificates', async ({ res, params, url }) => {
      const page = await store.listCertificates(params.principal!, pageQuery(url));
      sendJson(res, 200, { certificates: page.items, nextCursor: page.nextCursor });
    }),
    admin(
      ['POST'],
      '/principals/:principal/certificates',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        await refusePublisherRef(ctx.params.principal!);
        const bound = await store.bindCertificate(
          ctx.params.principal!,
          requiredString(body.san, 'san'),
          parseScopes(body.scopes ?? ['read']),
        );
        done(ctx, 201, bound, certificateDetails(bound));
      },
      'certificate.bind',
    ),
    admin(
      ['DELETE'],
      '/principals/:principal/certificates',
      async (ctx) => {
        const san = requiredString(ctx.url.searchParams.get('san') ?? '', 'san');
        await store.unbindCertificate(ctx.params.principal!, san);
        ctx.auditDetails = { san };
        ctx.res.writeHead(204).end();
      },
      'certificate.unbind',
    ),
    admin(
      ['POST'],
      '/keys/:keyId/revoke',
      async (ctx) => {
        const row = await store.revokeKey(ctx.params.keyId!);
        done(ctx, 200, row, keyDetails(row));
      },
      'key.revoke',
    ),
    admin(
      ['POST'],
      '/keys/:keyId/rotate',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const expiresInSeconds = checkKeyLifetime(body.expiresInSeconds);
        await refusePublisherRef((await store.findKey(ctx.params.keyId!)).principalId);
        const created = await store.rotateKey(ctx.params.keyId!, expiresInSeconds ? { expiresInSeconds } : {});
        done(ctx, 201, created, { ...keyDetails(created), rotatedFrom: ctx.params.keyId });
      },
      'key.rotate',
    ),
    admin(['GET'], '/repositories', async ({ res, url }) => {
      const page = await store.listRepositories(pageQuery(url), url.searchParams.get('prefix') ?? undefined);
      sendJson(res, 200, { repositories: page.items, nextCursor: page.nextCursor });
    }),
    admin(
      ['POST'],
      '/repositories',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const created = await store.createRepository(requiredString(body.name, 'name'));
        done(ctx, 201, created, { repository: created.name });
      },
      'repository.create',
    ),
    admin(['GET'], '/grants', async ({ res, url }) => {
      const principal = url.searchParams.get('principal');
      const page = await store.listGrants(principal ?? undefined, pageQuery(url));
      sendJson(res, 200, { grants: page.items, nextCursor: page.nextCursor });
    }),
    admin(
      ['PUT'],
      '/grants/:principal/:repository',
      async (ctx) => {
        const body = await readJsonBody(ctx.req);
        const grant = await store.addGrant(
          ctx.params.principal!,
          ctx.params.repository!,
          requiredString(body.permission, 'permission') as Permission,
        );
        done(ctx, 200, grant, grantDetails(grant));
      },
      'grant.set',
    ),
    admin(
      ['DELETE'],
      '/grants/:principal/:repository',
      async (ctx) => {
        await store.removeGrant(ctx.params.principal!, ctx.params.repository!);
        ctx.res.writeHead(204).end();
      },
      'grant.remove',
    ),
  ];
}
