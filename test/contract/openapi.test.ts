/**
 * The OpenAPI document against the code and against real responses:
 * - it is a valid OpenAPI 3.1 document (@apidevtools/swagger-parser);
 * - its paths and methods are exactly the routes the gateway registers;
 * - a live writer answers every documented operation (success and error cases), and every response
 *   (status, required headers, JSON body) validates against the document (ajv, JSON Schema 2020-12);
 * - removing a documented status makes both checks fail on the same real traffic;
 * - on the content, metadata and upload routes, the 200, 201, 206, 304, 412 and 416 answers carry
 *   exactly the header fields their responses declare: none undeclared, each declared one sent.
 * The harness (test/support/gateway.ts) applies the status check to every gateway of every suite.
 */
import { statsRoutes } from '../../proxy/stats/stats-routes.ts';
import { auditRoutes } from '../../proxy/audit/audit-routes.ts';
import SwaggerParser from '@apidevtools/swagger-parser';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../proxy/config/config.ts';
import { createConsole } from '../../proxy/console/console-module.ts';
import { APT_TEMPLATE, CONTENT_TEMPLATES } from '../../proxy/content/paths.ts';
import type { Route } from '../../proxy/server/route-types.ts';
import { Lifecycle } from '../../proxy/server/lifecycle.ts';
import { createGatewayMetrics } from '../../proxy/metrics/gateway-metrics.ts';
import { metricsRoute } from '../../proxy/metrics/metrics-endpoint.ts';
import {
  HTTP_METHODS,
  loadOpenApiDocument,
  openApiPath,
  operationOf,
  resolveRef,
  undescribedResponses,
  type OpenApiDocument,
} from '../../proxy/openapi/contract.ts';
import { artifactRoutes } from '../../proxy/content/artifact-routes.ts';
import { authAdminRoutes } from '../../proxy/admin/auth-admin-routes.ts';
import { ceilingAdminRoutes } from '../../proxy/admin/ceiling-admin-routes.ts';
import { contentRoutes } from '../../proxy/content/content-routes.ts';
import { multipartRoutes } from '../../proxy/multipart/multipart-routes.ts';
import { presignRoutes } from '../../proxy/content/presign-routes.ts';
import { healthRoutes } from '../../proxy/server/health-routes.ts';
import { rateLimitAdminRoutes } from '../../proxy/admin/rate-limit-admin-routes.ts';
import { cacheAdminRoutes } from '../../proxy/admin/cache-admin-routes.ts';
import { quotaAdminRoutes } from '../../proxy/admin/quota-admin-routes.ts';
import type { Services } from '../../proxy/server/services.ts';
import { Registry } from 'prom-client';
import { bearer, createRepository, createServiceAccount } from '../support/auth.ts';
import { randomContent, request, type RawResponse } from '../support/content.ts';
import { useTestDatabase } from '../support/database.ts';
import { startGateway, type GatewayProcess } from '../support/gateway.ts';

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const TOKEN = 'openapi-test-metrics-token';

/**
 * The routes buildApp composes, taken from the same factories. Their dependencies are only used
 * when a handler runs, which never happens here: only methods and templates are read.
 */
async function registeredRoutes(): Promise<Route[]> {
  const unused = undefined as never;
  const services = {
    config: loadConfig({}, '/'),
    lifecycle: new Lifecycle(),
    pool: unused,
    readiness: [],
    coordinator: unused,
  } as unknown as Services;
  return [
    // The writer's console; a reader's `/console` and `/console/` (readerConsoleRoutes) are the same operations.
    ...(await createConsole(services, { authenticate: unused }).routes({ registry: unused })),
    ...healthRoutes(services),
    ...authAdminRoutes(services),
    ...ceilingAdminRoutes(services),
    ...contentRoutes({ store: unused, catalog: unused, maxUploadBytes: 1 }),
    ...artifactRoutes({ catalog: unused, writable: true, readableRepositories: unused, grant: unused }),
    ...multipartRoutes({ sessions: unused, maxPartBytes: 1, writable: true, base: unused }),
    ...presignRoutes({ links: unused, catalog: unused, maxExpiresSeconds: 1, trusted: unused }),
    ...rateLimitAdminRoutes(unused),
    ...cacheAdminRoutes({ pool: unused, catalog: unused, sliceCache: unused }),
    ...quotaAdminRoutes(unused),
    ...auditRoutes(unused),
    ...statsRoutes(unused),
    metricsRoute(createGatewayMetrics({ registry: new Registry(), processMetrics: false }), undefined),
  ];
}

/** A compiled validator over the whole document: schemas are addressed by JSON pointer. */
function responseValidator(doc: OpenApiDocument) {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema({ ...doc, $id: 'openapi' });
  const get = (segments: string[]): unknown =>
    segments.reduce<unknown>((node, part) => (node as Record<string, unknown>)?.[part], doc);
  const unescape = (part: string) => part.replace(/~1/g, '/').replace(/~0/g, '~');
  const esc = (part: string) => encodeURIComponent(part.replace(/~/g, '~0').replace(/\//g, '~1'));

  /** Problems of one real response of `method template`; [] when the document describes it. */
  return function problemsOf(method: string, template: string, res: RawResponse): string[] {
    const where = `${method} ${openApiPath(template)} → ${res.status}`;
    const operation = operationOf(doc, method, template);
    if (!operation) return [`${where}: no such operation`];
    let pointer = ['paths', openApiPath(template), method.toLowerCase(), 'responses', String(res.status)];
    let response = get(pointer) as { $ref?: string } | undefined;
    if (response === undefined) return [`${where}: status not documented`];
    while (response?.$ref) {
      pointer = response.$ref.replace(/^#\//, '').split('/').map(unescape);
      response = get(pointer) as { $ref?: string };
    }
    const problems: string[] = [];
    const spec = response as { headers?: Record<string, unknown>; content?: Record<string, unknown> };
    for (const [name, raw] of Object.entries(spec.headers ?? {})) {
      const header = resolveRef<{ required?: boolean; schema?: object }>(doc, raw);
      const value = res.headers[name.toLowerCase()];
      if (value === undefined) {
        if (header.required) problems.push(`${where}: header ${name} missing`);
        continue;
      }
      if (header.schema && !ajv.validate(header.schema, String(value)))
        problems.push(`${where}: header ${name}=${String(value)}: ${ajv.errorsText()}`);
    }
    const hasBody = method !== 'HEAD' && res.status !== 204 && res.status !== 304;
    if (!spec.content) {
      if (hasBody && res.body.length > 0) problems.push(`${where}: a body the document does not describe`);
      return problems;
    }
    const contentType = String(res.headers['content-type'] ?? '')
      .split(';')[0]!
      .trim();
    const mediaKey =
      Object.keys(spec.content).find((k) => k === contentType) ?? Object.keys(spec.content).find((k) => k === '*/*');
    if (!mediaKey)
      return [
        ...problems,
        `${where}: content-type ${contentType} not documented (${Object.keys(spec.content).join(', ')})`,
      ];
    if (!hasBody || mediaKey !== 'application/json') return problems;
    const validate = ajv.getSchema(`openapi#/${[...pointer, 'content', mediaKey, 'schema'].map(esc).join('/')}`);
    if (!validate) return [...problems, `${where}: schema not found`];
    if (!validate(JSON.parse(res.body.toString())))
      problems.push(`${where}: body ${res.body.toString().slice(0, 200)}: ${ajv.errorsText(validate.errors)}`);
    return problems;
  };
}

/** The byte, metadata and upload routes: their answers' header fields are checked exactly. */
const EXACT_TEMPLATES: ReadonlySet<string> = new Set([
  ...Object.values(CONTENT_TEMPLATES),
  ...Object.values(CONTENT_TEMPLATES).map((t) => `${t}/content`),
  APT_TEMPLATE,
]);
const EXACT_STATUSES: ReadonlySet<number> = new Set([200, 201, 206, 304, 412, 416]);
/**
 * Fields about the message, not the response the document describes: Node's `Date` and the
 * connection's management and framing (RFC 9112 §6, §9). `Content-Type` is the media type of the
 * response's `content` map, and OpenAPI 3.1 (§4.8.21.1) ignores a header object of that name.
 */
const MESSAGE_FIELDS: ReadonlySet<string> = new Set([
  'date',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-type',
]);

/** The response object `method template → status` resolves to, and the pointer naming it. */
function responseOf(
  doc: OpenApiDocument,
  method: string,
  template: string,
  status: number,
): { name: string; headers: Record<string, unknown> } | undefined {
  let name = `${method} ${openApiPath(template)} → ${status}`;
  let response = operationOf(doc, method, template)?.responses[String(status)] as { $ref?: string } | undefined;
  if (response === undefined) return undefined;
  // Named by the object that declares the fields: every route answering with it is held to them.
  while (response.$ref) {
    name = response.$ref;
    const [, kind, key] = /^#\/components\/(\w+)\/(.+)$/.exec(response.$ref) ?? [];
    response = doc.components[kind ?? '']?.[key ?? ''] as { $ref?: string };
  }
  return { name, headers: (response as { headers?: Record<string, unknown> }).headers ?? {} };
}

/**
 * Of real responses of the content, metadata and upload routes: a header field sent that neither its
 * response object nor the document as a whole (`x-arkvory-any-request.headers`) declares, and a
 * header a response object declares that none of the responses it described carried.
 */
function headerFieldProblems(
  doc: OpenApiDocument,
  traffic: ReadonlyArray<{ method: string; template: string; res: RawResponse }>,
): string[] {
  const everywhere = new Set(doc['x-arkvory-any-request'].headers.map((h) => h.toLowerCase()));
  const problems: string[] = [];
  const sent = new Map<string, { declared: string[]; seen: Set<string> }>();
  for (const { method, template, res } of traffic) {
    if (!EXACT_TEMPLATES.has(template) || !EXACT_STATUSES.has(res.status)) continue;
    const response = responseOf(doc, method, template, res.status);
    if (!response) continue; // The status check reports it.
    const declared = Object.keys(response.headers).map((h) => h.toLowerCase());
    const record = sent.get(response.name) ?? { declared, seen: new Set<string>() };
    sent.set(response.name, record);
    for (const name of Object.keys(res.headers)) {
      record.seen.add(name);
      if (!declared.includes(name) && !everywhere.has(name) && !MESSAGE_FIELDS.has(name))
        problems.push(
          `${method} ${openApiPath(template)} → ${res.status}: ${name} sent, not declared by ${response.name}`,
        );
    }
  }
  for (const [name, { declared, seen }] of sent)
    for (const header of declared) if (!seen.has(header)) problems.push(`${name}: ${header} declared, never sent`);
  return [...new Set(problems)].sort();
}

describe('the document', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    const doc = await loadOpenApiDocument();
    expect(doc.openapi).toMatch(/^3\.1\./);
    await expect(SwaggerParser.validate(structuredClone(doc) as never)).resolves.toBeTruthy();
  });

  it('lists exactly the routes and methods the gateway registers', async () => {
    const doc = await loadOpenApiDocument();
    const registered = (await registeredRoutes()).flatMap((r) =>
      r.methods.map((m) => `${m} ${openApiPath(r.template)}`),
    );
    const documented = Object.entries(doc.paths).flatMap(([p, item]) =>
      HTTP_METHODS.filter((m) => item[m] !== undefined).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(documented.sort()).toEqual(registered.sort());
    expect(Object.keys(CONTENT_TEMPLATES).length).toBe(3);
  });
});

describe('real responses against the document', () => {
  const db = useTestDatabase();
  let gateway: GatewayProcess;
  const traffic: Array<{ method: string; template: string; res: RawResponse }> = [];
  let adminKey: string;
  let writer: { principalId: string; keyId: string; key: string; name: string };

  async function call(
    method: string,
    template: string,
    path: string,
    options: { headers?: Record<string, string>; body?: Buffer | object } = {},
  ): Promise<RawResponse> {
    const body =
      options.body === undefined
        ? undefined
        : Buffer.isBuffer(options.body)
          ? options.body
          : Buffer.from(JSON.stringify(options.body));
    const headers = {
      ...(options.body !== undefined && !Buffer.isBuffer(options.body) ? { 'content-type': 'application/json' } : {}),
      ...options.headers,
    };
    const res = await request(`${gateway.url}${path}`, { method, headers, ...(body ? { body } : {}) });
    traffic.push({ method, template, res });
    return res;
  }

  beforeAll(async () => {
    await createRepository(db.pool, 'libs');
    ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'contract-admin', scopes: ['admin'] }));
    writer = await createServiceAccount(db.pool, {
      name: 'contract-writer',
      scopes: ['read', 'write'],
      grants: { libs: 'write' },
    });
    gateway = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_REDIS_URL: inject('redisUrl'),
        ARKVORY_REDIS_KEY_PREFIX: `arkvory:openapi:${process.pid}:`,
        ARKVORY_METRICS_TOKEN: TOKEN,
        // Every request's line: past the client-fault budget they are written at debug only.
        ARKVORY_LOG_LEVEL: 'debug',
      },
      timeoutMs: 90_000,
    });

    const admin = bearer(adminKey);
    const user = bearer(writer.key);
    const bytes = randomContent(4096);
    // Health and metrics.
    for (const m of ['GET', 'HEAD']) {
      await call(m, '/health/live', '/health/live');
      await call(m, '/health/status', '/health/status');
      await call(m, '/health/ready', '/health/ready', { headers: user });
      await call(m, '/metrics', '/metrics', { headers: bearer(TOKEN) });
    }
    await call('GET', '/health/ready', '/health/ready');
    await call('GET', '/metrics', '/metrics');
    // Content and catalog, for the three kinds.
    const bases = {
      artifact: '/api/v1/repositories/libs/artifacts/a.bin',
      package: '/api/v1/repositories/libs/packages/pkg/1.0.0',
      asset: '/api/v1/repositories/libs/packages/pkg/1.0.0/assets/x.tgz',
    } as const;
    for (const kind of ['artifact', 'package', 'asset'] as const) {
      const t = CONTENT_TEMPLATES[kind];
      const base = bases[kind];
      await call('PUT', t, base, { headers: { ...user, 'content-type': 'application/octet-stream' }, body: bytes });
      await call('PUT', t, base, { headers: user, body: bytes });
      await call('PUT', t, base, { headers: user, body: randomContent(10) });
      const meta = await call('GET', t, base, { headers: user });
      await call('HEAD', t, base, { headers: user });
      await call('GET', t, base, { headers: { ...user, 'if-none-match': String(meta.headers.etag) } });
      await call('HEAD', t, base, { headers: { ...user, 'if-match': '"other"' } });
      await call('GET', t, base, { headers: { ...user, 'if-match': '"other"' } });
      // Preconditions of writes, refused before the body (412, nothing changed).
      await call('PUT', t, base, { headers: { ...user, 'if-none-match': '*' }, body: bytes });
      await call('DELETE', t, base, { headers: { ...user, 'if-match': '"other"' } });
      const full = await call('GET', `${t}/content`, `${base}/content`, { headers: user });
      await call('HEAD', `${t}/content`, `${base}/content`, { headers: user });
      await call('GET', `${t}/content`, `${base}/content`, { headers: { ...user, range: 'bytes=0-9' } });
      await call('GET', `${t}/content`, `${base}/content`, { headers: { ...user, range: 'bytes=0-9,20-29' } });
      await call('GET', `${t}/content`, `${base}/content`, { headers: { ...user, range: 'bytes=99999-' } });
      await call('GET', `${t}/content`, `${base}/content`, { headers: { ...user, 'if-match': '"other"' } });
      await call('HEAD', `${t}/content`, `${base}/content`, {
        headers: { ...user, 'if-unmodified-since': 'Sun, 06 Nov 1994 08:49:37 GMT' },
      });
      await call('GET', `${t}/content`, `${base}/content`, {
        headers: { ...user, 'if-none-match': String(full.headers.etag) },
      });
      await call('GET', `${t}/content`, `${base}/content`);
      const link = await call('POST', `${t}/presign`, `${base}/presign`, {
        headers: user,
        body: { expiresInSeconds: 600 },
      });
      const linkPath = String(JSON.parse(link.body.toString()).path);
      await call('GET', `${t}/content`, linkPath);
      await call('HEAD', `${t}/content`, linkPath, { headers: { range: 'bytes=0-3' } });
      await call(
        'GET',
        `${t}/content`,
        linkPath.replace(/X-Arkvory-Signature=[^&]+/, `X-Arkvory-Signature=${'A'.repeat(43)}`),
      );
      await call('POST', `${t}/presign`, `${base}/presign`, { headers: user, body: { expiresInSeconds: 0 } });
      await call('POST', `${t}/presign`, `${base}/presign`);
      await call('DELETE', t, base, { headers: user });
      await call('DELETE', t, base, { headers: user });
      await call('GET', `${t}/content`, `${base}/content`, { headers: user });
    }
    // A package version as a flat apt repository: `…/apt/{file}` is the asset `{file}`.
    await call('PUT', CONTENT_TEMPLATES.asset, '/api/v1/repositories/libs/packages/debs/1/assets/Packages', {
      headers: user,
      body: bytes,
    });
    const apt = '/api/v1/repositories/libs/packages/debs/1/apt';
    for (const m of ['GET', 'HEAD']) await call(m, APT_TEMPLATE, `${apt}/./Packages`, { headers: user });
    const aptFull = await call('GET', APT_TEMPLATE, `${apt}/Packages`, { headers: { ...user, range: 'bytes=0-9' } });
    await call('GET', APT_TEMPLATE, `${apt}/Packages`, {
      headers: { ...user, 'if-none-match': String(aptFull.headers.etag) },
    });
    await call('GET', APT_TEMPLATE, `${apt}/Packages`, { headers: { ...user, range: 'bytes=99999-' } });
    await call('GET', APT_TEMPLATE, `${apt}/InRelease`, { headers: user });
    await call('GET', APT_TEMPLATE, `${apt}/%E2%80%AEPackages`, { headers: user });
    await call('GET', APT_TEMPLATE, `${apt}/Packages`);
    // Bytes a browser could render: their 200 and 206 carry Content-Disposition, their 412 and 416 not.
    const page = '/api/v1/repositories/libs/artifacts/page.html';
    await call('PUT', CONTENT_TEMPLATES.artifact, page, {
      headers: { ...user, 'content-type': 'text/html' },
      body: bytes,
    });
    const ART = `${CONTENT_TEMPLATES.artifact}/content`;
    const html = await call('GET', ART, `${page}/content`, { headers: user });
    await call('GET', ART, `${page}/content`, { headers: { ...user, range: 'bytes=0-9' } });
    await call('GET', ART, `${page}/content`, { headers: { ...user, range: 'bytes=0-9,20-29' } });
    await call('GET', ART, `${page}/content`, { headers: { ...user, 'if-none-match': String(html.headers.etag) } });
    await call('GET', ART, `${page}/content`, { headers: { ...user, 'if-match': '"other"' } });
    await call('GET', ART, `${page}/content`, { headers: { ...user, range: 'bytes=99999-' } });
    await call('PUT', CONTENT_TEMPLATES.artifact, '/api/v1/repositories/libs/artifacts/big.bin', {
      headers: { ...user, 'content-digest': `sha-256=:${Buffer.alloc(32).toString('base64')}:` },
      body: bytes,
    });
    await call('PUT', CONTENT_TEMPLATES.artifact, '/api/v1/repositories/nope/artifacts/x', {
      headers: user,
      body: bytes,
    });
    for (const m of ['GET', 'HEAD']) await call(m, '/api/v1/repositories', '/api/v1/repositories', { headers: user });
    // Multipart: a session per kind, a part, the session, completion, an abort.
    const SESSION = '/api/v1/repositories/:repo/uploads/:upload';
    const opened = await call(
      'POST',
      `${CONTENT_TEMPLATES.artifact}/uploads`,
      '/api/v1/repositories/libs/artifacts/m.bin/uploads',
      { headers: user, body: { contentType: 'application/octet-stream' } },
    );
    const upload = String(JSON.parse(opened.body.toString()).upload);
    await call('PUT', `${SESSION}/parts/:part`, `/api/v1/repositories/libs/uploads/${upload}/parts/1`, {
      headers: user,
      body: bytes,
    });
    await call('GET', SESSION, `/api/v1/repositories/libs/uploads/${upload}`, { headers: user });
    await call('POST', `${SESSION}/complete`, `/api/v1/repositories/libs/uploads/${upload}/complete`, {
      headers: user,
      body: { parts: [{ part: 1 }] },
    });
    await call('POST', `${CONTENT_TEMPLATES.package}/uploads`, '/api/v1/repositories/libs/packages/pkg/2.0.0/uploads', {
      headers: user,
      body: { contentType: 'application/octet-stream' },
    });
    const assetSession = await call(
      'POST',
      `${CONTENT_TEMPLATES.asset}/uploads`,
      '/api/v1/repositories/libs/packages/pkg/2.0.0/assets/y.tgz/uploads',
      { headers: user, body: { contentType: 'application/octet-stream' } },
    );
    await call(
      'DELETE',
      SESSION,
      `/api/v1/repositories/libs/uploads/${String(JSON.parse(assetSession.body.toString()).upload)}`,
      { headers: user },
    );
    await call('GET', SESSION, '/api/v1/repositories/libs/uploads/no-such-upload', { headers: user });
    // Admin.
    const created = await call('POST', '/api/v1/admin/principals', '/api/v1/admin/principals', {
      headers: admin,
      body: { name: 'ci' },
    });
    const principalId = JSON.parse(created.body.toString()).id as string;
    await call('POST', '/api/v1/admin/principals', '/api/v1/admin/principals', {
      headers: admin,
      body: { name: 'ci' },
    });
    await call('POST', '/api/v1/admin/principals', '/api/v1/admin/principals', { headers: admin, body: {} });
    await call('GET', '/api/v1/admin/principals', '/api/v1/admin/principals', { headers: admin });
    await call('GET', '/api/v1/admin/principals', '/api/v1/admin/principals', { headers: user });
    await call('GET', '/api/v1/admin/principals/:principal', `/api/v1/admin/principals/${principalId}`, {
      headers: admin,
    });
    await call('GET', '/api/v1/admin/principals/:principal', '/api/v1/admin/principals/nobody', { headers: admin });
    await call('POST', '/api/v1/admin/principals/:principal/disable', '/api/v1/admin/principals/ci/disable', {
      headers: admin,
    });
    await call('POST', '/api/v1/admin/principals/:principal/enable', '/api/v1/admin/principals/ci/enable', {
      headers: admin,
    });
    const WEIGHT = '/api/v1/admin/principals/:principal/bandwidth-weight';
    await call('PUT', WEIGHT, '/api/v1/admin/principals/ci/bandwidth-weight', {
      headers: admin,
      body: { bandwidthWeight: 3 },
    });
    await call('PUT', WEIGHT, '/api/v1/admin/principals/ci/bandwidth-weight', {
      headers: admin,
      body: { bandwidthWeight: 0 },
    });
    await call('PUT', WEIGHT, '/api/v1/admin/principals/nobody/bandwidth-weight', {
      headers: admin,
      body: { bandwidthWeight: 2 },
    });
    const key = await call('POST', '/api/v1/admin/principals/:principal/keys', '/api/v1/admin/principals/ci/keys', {
      headers: admin,
      body: { scopes: ['read'], description: 'contract' },
    });
    const keyId = JSON.parse(key.body.toString()).keyId as string;
    await call('GET', '/api/v1/admin/principals/:principal/keys', '/api/v1/admin/principals/ci/keys', {
      headers: admin,
    });
    await call('POST', '/api/v1/admin/keys/:keyId/rotate', `/api/v1/admin/keys/${keyId}/rotate`, {
      headers: admin,
      body: {},
    });
    await call('POST', '/api/v1/admin/keys/:keyId/revoke', `/api/v1/admin/keys/${keyId}/revoke`, { headers: admin });
    const certs = '/api/v1/admin/principals/:principal/certificates';
    await call('POST', certs, '/api/v1/admin/principals/ci/certificates', {
      headers: admin,
      body: { san: 'spiffe://example.org/ci', scopes: ['read'] },
    });
    await call('POST', certs, '/api/v1/admin/principals/ci/certificates', {
      headers: admin,
      body: { san: 'URI:spiffe://example.org/ci' },
    });
    await call('POST', certs, '/api/v1/admin/principals/ci/certificates', {
      headers: admin,
      body: { san: 'bad name' },
    });
    await call('GET', certs, '/api/v1/admin/principals/ci/certificates', { headers: admin });
    await call('DELETE', certs, '/api/v1/admin/principals/ci/certificates?san=URI%3Aspiffe%3A%2F%2Fexample.org%2Fci', {
      headers: admin,
    });
    await call('DELETE', certs, '/api/v1/admin/principals/ci/certificates?san=DNS%3Anone.example', { headers: admin });
    await call('GET', '/api/v1/admin/repositories', '/api/v1/admin/repositories', { headers: admin });
    await call('GET', '/api/v1/admin/repositories', '/api/v1/admin/repositories?prefix=con', { headers: admin });
    await call('GET', '/api/v1/admin/repositories', '/api/v1/admin/repositories?prefix=Con', { headers: admin });
    await call('POST', '/api/v1/admin/repositories', '/api/v1/admin/repositories', {
      headers: admin,
      body: { name: 'docs' },
    });
    await call('POST', '/api/v1/admin/repositories', '/api/v1/admin/repositories', {
      headers: admin,
      body: { name: 'docs' },
    });
    // Groups and repository ceilings.
    const GROUP = '/api/v1/admin/groups/:group';
    const MEMBER = `${GROUP}/members/:principal`;
    const REPO_CEILINGS = '/api/v1/admin/repositories/:repository/ceilings';
    await call('PUT', GROUP, '/api/v1/admin/groups/crawlers', {
      headers: admin,
      body: { downloadBytesPerSec: 1048576 },
    });
    await call('PUT', GROUP, '/api/v1/admin/groups/crawlers', { headers: admin, body: { downloadBytesPerSec: 1 } });
    await call('PUT', GROUP, '/api/v1/admin/groups/crawlers', { headers: admin, body: { burst: 1 } });
    await call('PUT', MEMBER, '/api/v1/admin/groups/crawlers/members/ci', { headers: admin });
    await call('PUT', MEMBER, '/api/v1/admin/groups/crawlers/members/nobody', { headers: admin });
    await call('GET', GROUP, '/api/v1/admin/groups/crawlers', { headers: admin });
    await call('GET', `${GROUP}/members`, '/api/v1/admin/groups/crawlers/members?limit=1', { headers: admin });
    await call('GET', `${GROUP}/members`, '/api/v1/admin/groups/crawlers/members?cursor=forged!', { headers: admin });
    await call('GET', `${GROUP}/members`, '/api/v1/admin/groups/nothing/members', { headers: admin });
    await call('GET', GROUP, '/api/v1/admin/groups/nothing', { headers: admin });
    await call('GET', '/api/v1/admin/groups', '/api/v1/admin/groups', { headers: admin });
    await call('DELETE', MEMBER, '/api/v1/admin/groups/crawlers/members/ci', { headers: admin });
    await call('DELETE', GROUP, '/api/v1/admin/groups/crawlers', { headers: admin });
    await call('DELETE', GROUP, '/api/v1/admin/groups/crawlers', { headers: admin });
    await call('PUT', REPO_CEILINGS, '/api/v1/admin/repositories/docs/ceilings', {
      headers: admin,
      body: { uploadBytesPerSec: 65536, maxTransfers: 4 },
    });
    await call('PUT', REPO_CEILINGS, '/api/v1/admin/repositories/docs/ceilings', {
      headers: admin,
      body: { maxTransfers: 'four' },
    });
    await call('PUT', REPO_CEILINGS, '/api/v1/admin/repositories/nope/ceilings', { headers: admin, body: {} });
    await call('GET', REPO_CEILINGS, '/api/v1/admin/repositories/docs/ceilings', { headers: admin });
    await call('GET', REPO_CEILINGS, '/api/v1/admin/repositories/nope/ceilings', { headers: admin });
    await call('GET', '/api/v1/admin/repository-ceilings', '/api/v1/admin/repository-ceilings', { headers: admin });
    await call('PUT', '/api/v1/admin/grants/:principal/:repository', '/api/v1/admin/grants/ci/docs', {
      headers: admin,
      body: { permission: 'read' },
    });
    await call('GET', '/api/v1/admin/grants', '/api/v1/admin/grants?principal=ci', { headers: admin });
    await call('DELETE', '/api/v1/admin/grants/:principal/:repository', '/api/v1/admin/grants/ci/docs', {
      headers: admin,
    });
    await call('DELETE', '/api/v1/admin/grants/:principal/:repository', '/api/v1/admin/grants/ci/docs', {
      headers: admin,
    });
    // The audit trail of everything above; a filter it does not know is 400.
    await call('GET', '/api/v1/admin/audit', '/api/v1/admin/audit?action=grant&limit=2', { headers: admin });
    await call('GET', '/api/v1/admin/audit', '/api/v1/admin/audit?action=nope', { headers: admin });
    await call('GET', '/api/v1/admin/stats/artifacts', '/api/v1/admin/stats/artifacts?view=idle&days=0', {
      headers: admin,
    });
    await call('GET', '/api/v1/admin/stats/artifacts', '/api/v1/admin/stats/artifacts?view=sideways', {
      headers: admin,
    });
    await call('GET', '/api/v1/admin/stats/principals', '/api/v1/admin/stats/principals?since=2020-01-01', {
      headers: admin,
    });
    await call('GET', '/api/v1/admin/stats/principals', '/api/v1/admin/stats/principals?until=soon', {
      headers: admin,
    });
    // The slice cache (this gateway has none: a directory store); a purge is recorded all the same.
    await call('GET', '/api/v1/admin/cache', '/api/v1/admin/cache', { headers: admin });
    await call('POST', '/api/v1/admin/cache/purge', '/api/v1/admin/cache/purge', {
      headers: admin,
      body: { sha256: 'a'.repeat(64) },
    });
    await call('POST', '/api/v1/admin/cache/purge', '/api/v1/admin/cache/purge', {
      headers: admin,
      body: { repository: 'docs', artifact: 'no-such-artifact' },
    });
    await call('POST', '/api/v1/admin/cache/purge', '/api/v1/admin/cache/purge', { headers: admin, body: {} });
    // Storage quotas: set, shown, listed, an upload refused by one (507 with its numbers), removed.
    const QUOTA = '/api/v1/admin/quotas';
    const REPO_QUOTA = `${QUOTA}/repositories/:subject`;
    const PRINCIPAL_QUOTA = `${QUOTA}/principals/:subject`;
    await call('PUT', REPO_QUOTA, `${QUOTA}/repositories/libs`, { headers: admin, body: { limitBytes: 1 } });
    await call('PUT', REPO_QUOTA, `${QUOTA}/repositories/libs`, { headers: admin, body: { limitBytes: -1 } });
    await call('PUT', REPO_QUOTA, `${QUOTA}/repositories/Not%20A%20Repo`, { headers: admin, body: { limitBytes: 1 } });
    await call('GET', REPO_QUOTA, `${QUOTA}/repositories/libs`, { headers: admin });
    await call('GET', QUOTA, QUOTA, { headers: admin });
    await call('PUT', CONTENT_TEMPLATES.artifact, '/api/v1/repositories/libs/artifacts/over-quota.bin', {
      headers: user,
      body: bytes,
    });
    await call('DELETE', REPO_QUOTA, `${QUOTA}/repositories/libs`, { headers: admin });
    await call('DELETE', REPO_QUOTA, `${QUOTA}/repositories/libs`, { headers: admin });
    await call('PUT', PRINCIPAL_QUOTA, `${QUOTA}/principals/contract-writer`, {
      headers: admin,
      body: { limitBytes: 10 ** 12 },
    });
    await call('GET', PRINCIPAL_QUOTA, `${QUOTA}/principals/contract-writer`, { headers: admin });
    await call('GET', PRINCIPAL_QUOTA, `${QUOTA}/principals/nobody`, { headers: admin });
    await call('DELETE', PRINCIPAL_QUOTA, `${QUOTA}/principals/contract-writer`, { headers: admin });
    // Rate limits.
    await call('GET', '/api/v1/admin/rate-limits', '/api/v1/admin/rate-limits', { headers: admin });
    await call('GET', '/api/v1/admin/rate-limits/:limiter', '/api/v1/admin/rate-limits/gateway_request', {
      headers: admin,
    });
    await call('GET', '/api/v1/admin/rate-limits/:limiter', '/api/v1/admin/rate-limits/nope', { headers: admin });
    const rule = { name: 'contract_rule', action: 'log', limit: 1000, period_s: 60, characteristics: ['principal'] };
    await call('PUT', '/api/v1/admin/rate-limits', '/api/v1/admin/rate-limits', {
      headers: admin,
      body: { rate_limits: { gateway_request: [rule] } },
    });
    await call('PUT', '/api/v1/admin/rate-limits', '/api/v1/admin/rate-limits', {
      headers: admin,
      body: { rate_limits: { gateway_request: [{ name: 'Bad Name' }] } },
    });
    await call(
      'DELETE',
      '/api/v1/admin/rate-limits/:limiter/rules/:rule',
      '/api/v1/admin/rate-limits/gateway_request/rules/contract_rule',
      { headers: admin },
    );
    await call(
      'DELETE',
      '/api/v1/admin/rate-limits/:limiter/rules/:rule',
      '/api/v1/admin/rate-limits/gateway_request/rules/contract_rule',
      { headers: admin },
    );
    // The console: page, assets, sign-in, the session API (with and without its CSRF token).
    for (const m of ['GET', 'HEAD']) {
      await call(m, '/console', '/console');
      await call(m, '/console/', '/console/');
      await call(m, '/console/static/:file', '/console/static/console.js');
    }
    await call('GET', '/console/static/:file', '/console/static/console.css');
    await call('GET', '/console/static/:file', '/console/static/missing.js');
    await call('GET', '/console/session', '/console/session');
    await call('POST', '/console/session', '/console/session', { headers: user });
    await call('POST', '/console/session', '/console/session');
    const signedIn = await call('POST', '/console/session', '/console/session', { headers: admin });
    const session = {
      cookie: String(signedIn.headers['set-cookie']![0]).split(';')[0]!,
      'x-csrf-token': String(JSON.parse(signedIn.body.toString()).csrfToken),
    };
    const noCsrf = { cookie: session.cookie };
    await call('GET', '/console/session', '/console/session', { headers: noCsrf });
    await call('GET', '/console/api/status', '/console/api/status', { headers: noCsrf });
    await call('GET', '/console/api/status', '/console/api/status');
    await call('GET', '/console/api/rate-limits', '/console/api/rate-limits', { headers: noCsrf });
    const consoleRule = { name: 'console_contract_rule', action: 'log', limit: 1000, period_s: 60 };
    await call('PUT', '/console/api/rate-limits', '/console/api/rate-limits', {
      headers: session,
      body: { rate_limits: { gateway_request: [consoleRule] } },
    });
    await call('PUT', '/console/api/rate-limits', '/console/api/rate-limits', {
      headers: noCsrf,
      body: { rate_limits: { gateway_request: [consoleRule] } },
    });
    await call('PUT', '/console/api/rate-limits', '/console/api/rate-limits', {
      headers: session,
      body: { rate_limits: { gateway_request: [{ name: 'Bad Name', action: 'limit' }] } },
    });
    await call('PUT', '/console/api/rate-limits', '/console/api/rate-limits', {
      headers: { ...session, 'content-type': 'application/json' },
      body: Buffer.from('{'),
    });
    await call(
      'DELETE',
      '/console/api/rate-limits/:limiter/rules/:rule',
      '/console/api/rate-limits/gateway_request/rules/console_contract_rule',
      { headers: session },
    );
    await call(
      'DELETE',
      '/console/api/rate-limits/:limiter/rules/:rule',
      '/console/api/rate-limits/gateway_request/rules/console_contract_rule',
      { headers: session },
    );
    await call('GET', '/console/api/access', '/console/api/access', { headers: noCsrf });
    // The listings that continue the access view's keys, grants and repositories.
    await call('GET', '/console/api/principals/:principal/keys', '/console/api/principals/ci/keys?limit=1', {
      headers: noCsrf,
    });
    await call('GET', '/console/api/principals/:principal/keys', '/console/api/principals/nobody/keys', {
      headers: noCsrf,
    });
    await call('GET', '/console/api/grants', '/console/api/grants?principal=ci&limit=1', { headers: noCsrf });
    await call('GET', '/console/api/grants', '/console/api/grants?cursor=forged!', { headers: noCsrf });
    await call('GET', '/console/api/repositories', '/console/api/repositories?prefix=c&limit=1', { headers: noCsrf });
    await call('GET', '/console/api/repositories', '/console/api/repositories?cursor=forged!', { headers: noCsrf });
    // The usage view: the admin API's answers, a bad filter refused alike.
    await call('GET', '/console/api/stats/artifacts', '/console/api/stats/artifacts?view=top&limit=5', {
      headers: noCsrf,
    });
    await call('GET', '/console/api/stats/artifacts', '/console/api/stats/artifacts?view=idle&days=ninety', {
      headers: noCsrf,
    });
    await call('GET', '/console/api/stats/principals', '/console/api/stats/principals?limit=5', { headers: noCsrf });
    await call('POST', '/console/api/principals', '/console/api/principals', {
      headers: session,
      body: { name: 'console-ci' },
    });
    await call('POST', '/console/api/principals', '/console/api/principals', {
      headers: session,
      body: { name: 'console-ci' },
    });
    await call('POST', '/console/api/principals', '/console/api/principals', {
      headers: noCsrf,
      body: { name: 'console-ci2' },
    });
    const consoleKey = await call(
      'POST',
      '/console/api/principals/:principal/keys',
      '/console/api/principals/console-ci/keys',
      { headers: session, body: { scopes: ['read'] } },
    );
    await call('POST', '/console/api/principals/:principal/keys', '/console/api/principals/nobody/keys', {
      headers: session,
      body: { scopes: ['read'] },
    });
    await call(
      'POST',
      '/console/api/keys/:keyId/revoke',
      `/console/api/keys/${String(JSON.parse(consoleKey.body.toString()).keyId)}/revoke`,
      { headers: session },
    );
    await call('POST', '/console/api/keys/:keyId/revoke', '/console/api/keys/0000000000000000/revoke', {
      headers: session,
    });
    await call(
      'PUT',
      '/console/api/principals/:principal/bandwidth-weight',
      '/console/api/principals/console-ci/bandwidth-weight',
      { headers: session, body: { bandwidthWeight: 5 } },
    );
    await call('PUT', '/console/api/grants/:principal/:repository', '/console/api/grants/console-ci/libs', {
      headers: session,
      body: { permission: 'read' },
    });
    await call('PUT', '/console/api/grants/:principal/:repository', '/console/api/grants/console-ci/nope', {
      headers: session,
      body: { permission: 'read' },
    });
    await call('PUT', '/console/api/groups/:group', '/console/api/groups/console-group', {
      headers: session,
      body: { uploadBytesPerSec: 65536 },
    });
    await call('PUT', '/console/api/groups/:group', '/console/api/groups/console-group', {
      headers: noCsrf,
      body: { uploadBytesPerSec: 65536 },
    });
    await call(
      'PUT',
      '/console/api/groups/:group/members/:principal',
      '/console/api/groups/console-group/members/console-ci',
      { headers: session },
    );
    await call('GET', '/console/api/ceilings', '/console/api/ceilings', { headers: noCsrf });
    await call('GET', '/console/api/groups', '/console/api/groups?limit=1', { headers: noCsrf });
    await call('GET', '/console/api/groups', '/console/api/groups?cursor=forged!', { headers: noCsrf });
    await call('GET', '/console/api/groups/:group/members', '/console/api/groups/console-group/members', {
      headers: noCsrf,
    });
    await call('GET', '/console/api/repository-ceilings', '/console/api/repository-ceilings', { headers: noCsrf });
    await call(
      'DELETE',
      '/console/api/groups/:group/members/:principal',
      '/console/api/groups/console-group/members/console-ci',
      { headers: session },
    );
    await call('DELETE', '/console/api/groups/:group', '/console/api/groups/console-group', { headers: session });
    await call('DELETE', '/console/api/groups/:group', '/console/api/groups/console-group', { headers: session });
    await call('PUT', '/console/api/repositories/:repository/ceilings', '/console/api/repositories/docs/ceilings', {
      headers: session,
      body: { uploadBytesPerSec: 0, maxTransfers: 0 },
    });
    await call('DELETE', '/console/api/session', '/console/api/session', { headers: noCsrf });
    await call('DELETE', '/console/api/session', '/console/api/session', { headers: session });
    await call('DELETE', '/console/api/session', '/console/api/session', { headers: session });
    // Requests that match no route, and a known path with a method it lacks.
    traffic.push({ method: 'GET', template: 'unmatched', res: await request(`${gateway.url}/nowhere`) });
    traffic.push({
      method: 'POST',
      template: '/health/live',
      res: await request(`${gateway.url}/health/live`, { method: 'POST' }),
    });
  }, 240_000);

  afterAll(async () => {
    await gateway?.stop('SIGTERM');
  });

  it('every response of every documented operation validates: status, required headers, JSON body', async () => {
    const doc = await loadOpenApiDocument();
    const problemsOf = responseValidator(doc);
    const problems = traffic
      .filter((t) => t.template !== 'unmatched' && operationOf(doc, t.method, t.template))
      .flatMap((t) => problemsOf(t.method, t.template, t.res));
    expect(problems).toEqual([]);
    // Every operation of the document was exercised at least once.
    const seen = new Set(traffic.map((t) => `${t.method} ${openApiPath(t.template)}`));
    const operations = Object.entries(doc.paths).flatMap(([p, item]) =>
      HTTP_METHODS.filter((m) => item[m] !== undefined).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(operations.filter((o) => !seen.has(o))).toEqual([]);
  });

  it('each request hit the route it was meant for, and the log lines are all described', async () => {
    const doc = await loadOpenApiDocument();
    const lines = gateway.logLines().filter((l) => l.msg === 'request');
    // The harness also polled /health/status while the gateway started.
    expect(lines.length).toBeGreaterThanOrEqual(traffic.length);
    const routes = new Map<string, number>();
    for (const l of lines)
      routes.set(
        `${String(l.method)} ${String(l.route)}`,
        (routes.get(`${String(l.method)} ${String(l.route)}`) ?? 0) + 1,
      );
    for (const t of traffic) expect(routes.has(`${t.method} ${t.template}`), `${t.method} ${t.template}`).toBe(true);
    expect(undescribedResponses(doc, lines)).toEqual([]);
    // Not vacuous: the document is strict about statuses it does not list.
    expect(
      undescribedResponses(doc, [{ msg: 'request', method: 'GET', route: '/health/live', status: 418 }]),
    ).toHaveLength(1);
    expect(
      undescribedResponses(doc, [{ msg: 'request', method: 'GET', route: '/api/v1/undocumented', status: 200 }]),
    ).toHaveLength(1);
    expect(
      undescribedResponses(doc, [{ msg: 'request', method: 'GET', route: 'unmatched', status: 200 }]),
    ).toHaveLength(1);
    // A client gone before any answer (recorded as 499) got no response to describe.
    expect(
      undescribedResponses(doc, [{ msg: 'request', method: 'GET', route: CONTENT_TEMPLATES.artifact, status: 499 }]),
    ).toEqual([]);
  });

  it('the content, metadata and upload routes send exactly the header fields their responses declare', async () => {
    const doc = await loadOpenApiDocument();
    expect(headerFieldProblems(doc, traffic)).toEqual([]);
    // Each status was met, on each kind of route.
    const met = new Set(
      traffic
        .filter((t) => EXACT_TEMPLATES.has(t.template) && EXACT_STATUSES.has(t.res.status))
        .map((t) => {
          const bytes = t.template === APT_TEMPLATE || t.template.endsWith('/content');
          return `${t.method} ${bytes ? 'content' : 'base'} ${t.res.status}`;
        }),
    );
    expect([...met].sort()).toEqual(
      [
        'DELETE base 412',
        'GET base 200',
        'GET base 304',
        'GET base 412',
        'HEAD base 200',
        'HEAD base 412',
        'PUT base 200',
        'PUT base 201',
        'PUT base 412',
        'GET content 200',
        'GET content 206',
        'GET content 304',
        'GET content 412',
        'GET content 416',
        'HEAD content 200',
        'HEAD content 412',
      ].sort(),
    );
  });

  it('a header field sent but not declared, or declared but never sent, fails the header check', async () => {
    const doc = await loadOpenApiDocument();
    const responses = doc.components.responses as Record<string, { headers: Record<string, unknown> }>;
    expect(responses.RangeNotSatisfiable!.headers['content-range']).toBeDefined();
    delete responses.RangeNotSatisfiable!.headers['content-range'];
    responses.NotModified!.headers.vary = { schema: { type: 'string' } };
    const problems = headerFieldProblems(doc, traffic);
    expect(problems).toContain(
      `GET ${openApiPath(`${CONTENT_TEMPLATES.artifact}/content`)} → 416: content-range sent, not declared by #/components/responses/RangeNotSatisfiable`,
    );
    expect(problems).toContain('#/components/responses/NotModified: vary declared, never sent');
    expect(problems.every((p) => /content-range sent|vary declared/.test(p))).toBe(true);
  });

  it('removing a documented status makes the same real traffic fail both checks', async () => {
    const doc = await loadOpenApiDocument();
    const put = operationOf(doc, 'PUT', CONTENT_TEMPLATES.artifact)!;
    expect(put.responses['201']).toBeDefined();
    delete put.responses['201'];
    const lines = gateway.logLines().filter((l) => l.msg === 'request');
    expect(undescribedResponses(doc, lines)).toEqual([
      'PUT /api/v1/repositories/:repo/artifacts/:id → 201: PUT /api/v1/repositories/{repo}/artifacts/{id} does not document status 201',
    ]);
    const problemsOf = responseValidator(doc);
    const created = traffic.find(
      (t) => t.method === 'PUT' && t.template === CONTENT_TEMPLATES.artifact && t.res.status === 201,
    )!;
    expect(problemsOf('PUT', CONTENT_TEMPLATES.artifact, created.res)).toEqual([
      'PUT /api/v1/repositories/{repo}/artifacts/{id} → 201: status not documented',
    ]);
  });

  it('a body the document does not describe fails the body check', async () => {
    const doc = await loadOpenApiDocument();
    const problemsOf = responseValidator(doc);
    const live = traffic.find((t) => t.method === 'GET' && t.template === '/health/live')!;
    const altered = {
      ...live.res,
      body: Buffer.from(JSON.stringify({ status: 'live', principal: writer.principalId })),
    };
    expect(problemsOf('GET', '/health/live', altered)).toHaveLength(1);
  });
});
