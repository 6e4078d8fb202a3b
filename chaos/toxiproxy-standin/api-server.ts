/**
 * The HTTP API of the stand-in, route for route the subset of Shopify/toxiproxy v2 `api.go` the
 * chaos suite uses: same paths, methods (POST or PATCH to update), JSON shapes and status codes
 * (201 create proxy, 200 create toxic, 204 delete and reset, 404 unknown, 409 duplicate, 400 bad
 * body, 500 listen failure). `/populate` is not implemented.
 */
import http from 'node:http';
import { ApiError, API_ERRORS } from './api-errors.ts';
import { optionalBoolean, optionalInteger, optionalNumber, optionalObject, optionalString, readJsonObject } from './json-body.ts';
import { ProxyAlreadyStartedError, StandinProxy } from './proxy.ts';
import { TOXIC_ATTRIBUTES, isToxicType, type StreamDirection, type ToxicSpec } from './toxics.ts';

export const STANDIN_VERSION = '2.12.0-arkvory-standin';

type Handler = (request: http.IncomingMessage, params: string[]) => Promise<Reply>;
type Reply = { status: number; json?: unknown };

interface Route {
  pattern: RegExp;
  methods: Record<string, Handler>;
}

export class ApiState {
  readonly proxies = new Map<string, StandinProxy>();

  getProxy(name: string): StandinProxy {
    const proxy = this.proxies.get(name);
    if (!proxy) throw API_ERRORS.proxyNotFound();
    return proxy;
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.proxies.values()].map((p) => p.stop()));
    this.proxies.clear();
  }
}

function readAttributes(type: keyof typeof TOXIC_ATTRIBUTES, source: Record<string, unknown> | undefined, base: Record<string, number>): Record<string, number> {
  const attributes: Record<string, number> = {};
  for (const field of TOXIC_ATTRIBUTES[type]) {
    attributes[field] = (source ? optionalInteger(source, field) : undefined) ?? base[field] ?? 0;
  }
  return attributes;
}

export function createRoutes(state: ApiState): Route[] {
  const proxyIndex: Handler = async () => ({ status: 200, json: Object.fromEntries([...state.proxies].map(([name, p]) => [name, p.toJSON()])) });

  const proxyCreate: Handler = async (request) => {
    const body = await readJsonObject(request);
    const name = optionalString(body, 'name') ?? '';
    const listen = optionalString(body, 'listen') ?? '';
    const upstream = optionalString(body, 'upstream') ?? '';
    const enabled = optionalBoolean(body, 'enabled') ?? true;
    if (name === '') throw API_ERRORS.missingField('name');
    if (upstream === '') throw API_ERRORS.missingField('upstream');
    if (state.proxies.has(name)) throw API_ERRORS.proxyAlreadyExists();
    const proxy = new StandinProxy(name, listen, upstream);
    if (enabled) await proxy.start();
    state.proxies.set(name, proxy);
    return { status: 201, json: proxy.toJSON() };
  };

  const proxyShow: Handler = async (_request, [name]) => ({ status: 200, json: state.getProxy(name!).toJSON() });

  const proxyUpdate: Handler = async (request, [name]) => {
    const proxy = state.getProxy(name!);
    const body = await readJsonObject(request);
    await proxy.update({
      listen: optionalString(body, 'listen') ?? proxy.listen,
      upstream: optionalString(body, 'upstream') ?? proxy.upstream,
      enabled: optionalBoolean(body, 'enabled') ?? proxy.enabled,
    });
    return { status: 200, json: proxy.toJSON() };
  };

  const proxyDelete: Handler = async (_request, [name]) => {
    const proxy = state.getProxy(name!);
    await proxy.stop();
    state.proxies.delete(name!);
    return { status: 204 };
  };

  const reset: Handler = async () => {
    for (const proxy of state.proxies.values()) {
      try {
        await proxy.start();
      } catch (err) {
        if (!(err instanceof ProxyAlreadyStartedError)) throw err;
      }
      proxy.removeAllToxics();
    }
    return { status: 204 };
  };

  const toxicIndex: Handler = async (_request, [name]) => ({ status: 200, json: state.getProxy(name!).allToxics() });

  const toxicCreate: Handler = async (request, [name]) => {
    const proxy = state.getProxy(name!);
    const body = await readJsonObject(request);
    const type = optionalString(body, 'type') ?? '';
    const stream = optionalString(body, 'stream') ?? 'downstream';
    const toxicity = optionalNumber(body, 'toxicity') ?? 1;
    let toxicName = optionalString(body, 'name') ?? '';
    if (stream !== 'upstream' && stream !== 'downstream') throw API_ERRORS.invalidStream();
    if (toxicName === '') toxicName = `${type}_${stream}`;
    if (!isToxicType(type)) throw API_ERRORS.invalidToxicType();
    if (proxy.findToxic(toxicName)) throw API_ERRORS.toxicAlreadyExists();
    const spec: ToxicSpec = {
      attributes: readAttributes(type, optionalObject(body, 'attributes'), {}),
      name: toxicName,
      type,
      stream: stream satisfies StreamDirection,
      toxicity,
    };
    proxy.addToxic(spec);
    return { status: 200, json: spec };
  };

  const toxicShow: Handler = async (_request, [name, toxicName]) => {
    const spec = state.getProxy(name!).findToxic(toxicName!);
    if (!spec) throw API_ERRORS.toxicNotFound();
    return { status: 200, json: spec };
  };

  const toxicUpdate: Handler = async (request, [name, toxicName]) => {
    const proxy = state.getProxy(name!);
    const existing = proxy.findToxic(toxicName!);
    if (!existing) throw API_ERRORS.toxicNotFound();
    const body = await readJsonObject(request);
    const updated: ToxicSpec = {
      ...existing,
      attributes: readAttributes(existing.type, optionalObject(body, 'attributes'), existing.attributes),
      toxicity: optionalNumber(body, 'toxicity') ?? existing.toxicity,
    };
    proxy.updateToxic(updated);
    return { status: 200, json: updated };
  };

  const toxicDelete: Handler = async (_request, [name, toxicName]) => {
    const proxy = state.getProxy(name!);
    const spec = proxy.findToxic(toxicName!);
    if (!spec) throw API_ERRORS.toxicNotFound();
    proxy.removeToxic(spec);
    return { status: 204 };
  };

  const version: Handler = async () => ({ status: 200, json: { version: STANDIN_VERSION } });

  return [
    { pattern: /^\/reset$/, methods: { POST: reset } },
    { pattern: /^\/version$/, methods: { GET: version } },
    { pattern: /^\/proxies$/, methods: { GET: proxyIndex, POST: proxyCreate } },
    { pattern: /^\/proxies\/([^/]+)$/, methods: { GET: proxyShow, POST: proxyUpdate, PATCH: proxyUpdate, DELETE: proxyDelete } },
    { pattern: /^\/proxies\/([^/]+)\/toxics$/, methods: { GET: toxicIndex, POST: toxicCreate } },
    { pattern: /^\/proxies\/([^/]+)\/toxics\/([^/]+)$/, methods: { GET: toxicShow, POST: toxicUpdate, PATCH: toxicUpdate, DELETE: toxicDelete } },
  ];
}

function sendError(response: http.ServerResponse, error: ApiError): void {
  // Go's http.Error: the JSON travels as text/plain with a trailing newline.
  response.writeHead(error.status, { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff' });
  response.end(`${JSON.stringify({ error: error.message, status: error.status })}\n`);
}

export function createApiHandler(state: ApiState): http.RequestListener {
  const routes = createRoutes(state);
  // Mutations run one at a time, as the real server holds its collection locks.
  let queue: Promise<unknown> = Promise.resolve();
  return (request, response) => {
    const path = new URL(request.url ?? '/', 'http://standin').pathname;
    const route = routes.find((r) => r.pattern.test(path));
    if (!route) {
      response.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
      response.end('404 page not found\n');
      return;
    }
    const handler = route.methods[request.method ?? ''];
    if (!handler) {
      response.writeHead(405);
      response.end();
      return;
    }
    const params = (route.pattern.exec(path) ?? []).slice(1).map((p) => decodeURIComponent(p));
    const run = async (): Promise<void> => {
      try {
        const reply = await handler(request, params);
        if (reply.json === undefined) {
          response.writeHead(reply.status);
          response.end();
        } else {
          response.writeHead(reply.status, { 'content-type': 'application/json' });
          response.end(JSON.stringify(reply.json));
        }
      } catch (err) {
        sendError(response, err instanceof ApiError ? err : new ApiError(500, (err as Error).message));
      }
    };
    const next = queue.then(run, run);
    queue = next;
  };
}
