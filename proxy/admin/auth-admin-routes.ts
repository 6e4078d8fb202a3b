import { AdminStore, checkKeyLifetime, parseScopes } from '../../policy/auth/admin-store.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { PageRequest } from '../../policy/auth/page.ts';
import type { Route } from '../server/route-types.ts';
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

/** `/api/v1/admin/…`: principals, keys, repositories, grants. Every route needs the admin scope. */
export function authAdminRoutes(services: Services): Route[] {
  const store = new AdminStore(services.pool);
  const admin = (methods: Route['methods'], template: string, handle: Route['handle']): Route => ({
    methods,
    template: `${BASE}${template}`,
    access: 'admin',
    handle,
  });
  return [
    admin(['GET'], '/principals', async ({ res, url }) => {
      const page = await store.listPrincipals(pageQuery(url));
      sendJson(res, 200, { principals: page.items, nextCursor: page.nextCursor });
    }),
    admin(['POST'], '/principals', async ({ req, res }) => {
      const body = await readJsonBody(req);
      sendJson(res, 201, await store.createPrincipal(requiredString(body.name, 'name')));
    }),
    admin(['GET'], '/principals/:principal', async ({ res, params }) =>
      sendJson(res, 200, await store.findPrincipal(params.principal!)),
    ),
    admin(['POST'], '/principals/:principal/disable', async ({ res, params }) =>
      sendJson(res, 200, await store.setPrincipalDisabled(params.principal!, true)),
    ),
    admin(['POST'], '/principals/:principal/enable', async ({ res, params }) =>
      sendJson(res, 200, await store.setPrincipalDisabled(params.principal!, false)),
    ),
    admin(['PUT'], '/principals/:principal/bandwidth-weight', async ({ req, res, params }) => {
      const body = await readJsonBody(req);
      sendJson(res, 200, await store.setPrincipalWeight(params.principal!, body.bandwidthWeight));
    }),
    admin(['GET'], '/principals/:principal/keys', async ({ res, params, url }) => {
      const page = await store.listKeys(params.principal!, pageQuery(url));
      sendJson(res, 200, { keys: page.items, nextCursor: page.nextCursor });
    }),
    admin(['POST'], '/principals/:principal/keys', async ({ req, res, params }) => {
      const body = await readJsonBody(req);
      const expiresInSeconds = checkKeyLifetime(body.expiresInSeconds);
      const created = await store.createKey(params.principal!, {
        scopes: parseScopes(body.scopes ?? ['read']),
        ...(expiresInSeconds ? { expiresInSeconds } : {}),
        ...(body.kind !== undefined ? { kind: body.kind as 'service' | 'personal' } : {}),
        ...(typeof body.description === 'string' ? { description: body.description } : {}),
      });
      sendJson(res, 201, created);
    }),
    admin(['GET'], '/principals/:principal/certificates', async ({ res, params, url }) => {
      const page = await store.listCertificates(params.principal!, pageQuery(url));
      sendJson(res, 200, { certificates: page.items, nextCursor: page.nextCursor });
    }),
    admin(['POST'], '/principals/:principal/certificates', async ({ req, res, params }) => {
      const body = await readJsonBody(req);
      sendJson(
        res,
        201,
        await store.bindCertificate(
          params.principal!,
          requiredString(body.san, 'san'),
          parseScopes(body.scopes ?? ['read']),
        ),
      );
    }),
    admin(['DELETE'], '/principals/:principal/certificates', async ({ res, params, url }) => {
      await store.unbindCertificate(params.principal!, requiredString(url.searchParams.get('san') ?? '', 'san'));
      res.writeHead(204).end();
    }),
    admin(['POST'], '/keys/:keyId/revoke', async ({ res, params }) =>
      sendJson(res, 200, await store.revokeKey(params.keyId!)),
    ),
    admin(['POST'], '/keys/:keyId/rotate', async ({ req, res, params }) => {
      const body = await readJsonBody(req);
      const expiresInSeconds = checkKeyLifetime(body.expiresInSeconds);
      sendJson(res, 201, await store.rotateKey(params.keyId!, expiresInSeconds ? { expiresInSeconds } : {}));
    }),
    admin(['GET'], '/repositories', async ({ res, url }) => {
      const page = await store.listRepositories(pageQuery(url));
      sendJson(res, 200, { repositories: page.items, nextCursor: page.nextCursor });
    }),
    admin(['POST'], '/repositories', async ({ req, res }) => {
      const body = await readJsonBody(req);
      sendJson(res, 201, await store.createRepository(requiredString(body.name, 'name')));
    }),
    admin(['GET'], '/grants', async ({ res, url }) => {
      const principal = url.searchParams.get('principal');
      const page = await store.listGrants(principal ?? undefined, pageQuery(url));
      sendJson(res, 200, { grants: page.items, nextCursor: page.nextCursor });
    }),
    admin(['PUT'], '/grants/:principal/:repository', async ({ req, res, params }) => {
      const body = await readJsonBody(req);
      sendJson(
        res,
        200,
        await store.addGrant(
          params.principal!,
          params.repository!,
          requiredString(body.permission, 'permission') as Permission,
        ),
      );
    }),
    admin(['DELETE'], '/grants/:principal/:repository', async ({ res, params }) => {
      await store.removeGrant(params.principal!, params.repository!);
      res.writeHead(204).end();
    }),
  ];
}
