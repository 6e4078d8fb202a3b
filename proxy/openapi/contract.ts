/**
 * The OpenAPI document (`openapi.yaml`, OpenAPI 3.1) and the rule that decides whether a response a
 * gateway gave is one the document describes. The test harness applies it to every `request` log
 * line of every gateway the integration suites start; the contract test applies it to real
 * responses of every route.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { CLIENT_CLOSED_REQUEST } from '../server/recorded-status.ts';

export const OPENAPI_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), 'openapi.yaml');

export const HTTP_METHODS = ['get', 'head', 'put', 'post', 'delete', 'patch', 'options'] as const;

export interface OpenApiDocument {
  openapi: string;
  paths: Record<string, Record<string, unknown>>;
  components: Record<string, Record<string, unknown>>;
  /**
   * What holds for every request: the statuses of one matching no route and of a known path's
   * missing method, and the header fields any answer may carry beside those of its response object.
   */
  'x-arkvory-any-request': { unmatched: string[]; methodNotAllowed: string[]; headers: string[] };
  [key: string]: unknown;
}

export interface Operation {
  operationId: string;
  responses: Record<string, unknown>;
  [key: string]: unknown;
}

/** The document as plain data (YAML merge keys resolved); a fresh copy each call. */
export async function loadOpenApiDocument(file = OPENAPI_PATH): Promise<OpenApiDocument> {
  // The document is ours, not input: its shared error blocks are aliased from every admin operation,
  // past the library's default guard against alias bombs (100).
  return parse(await readFile(file, 'utf8'), { merge: true, maxAliasCount: 10_000 }) as OpenApiDocument;
}

/** `/api/v1/repositories/:repo/artifacts/:id` → `/api/v1/repositories/{repo}/artifacts/{id}`. */
export function openApiPath(template: string): string {
  return template.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

export function operationOf(doc: OpenApiDocument, method: string, template: string): Operation | undefined {
  const item = doc.paths[openApiPath(template)];
  return item?.[method.toLowerCase()] as Operation | undefined;
}

/** Follows local `$ref`s (`#/components/...`). */
export function resolveRef<T = unknown>(doc: OpenApiDocument, value: unknown): T {
  let current = value as { $ref?: string };
  for (let hops = 0; current && typeof current.$ref === 'string'; hops++) {
    if (hops > 20) throw new Error(`$ref loop at ${current.$ref}`);
    const parts = current.$ref.replace(/^#\//, '').split('/');
    let target: unknown = doc;
    for (const part of parts)
      target = (target as Record<string, unknown>)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    if (target === undefined) throw new Error(`unresolvable $ref ${current.$ref}`);
    current = target as { $ref?: string };
  }
  return current as T;
}

export interface ObservedResponse {
  method: string;
  /** Route template as the gateway logs it, or `unmatched`. */
  route: string;
  status: number;
}

/**
 * Why the document does not describe this response, or undefined when it does (or when there was
 * none: a 499 is a request whose client left before the answer). A matched route must have the
 * operation and the status; `unmatched` and a known path's missing method follow the document's
 * `x-arkvory-any-request` rules.
 */
export function whyUndescribed(doc: OpenApiDocument, observed: ObservedResponse): string | undefined {
  // The client left before any answer: nothing was sent for the document to describe.
  if (observed.status === CLIENT_CLOSED_REQUEST) return undefined;
  const status = String(observed.status);
  const any = doc['x-arkvory-any-request'];
  if (observed.route === 'unmatched')
    return any.unmatched.includes(status) ? undefined : `status ${status} for a request that matched no route`;
  const item = doc.paths[openApiPath(observed.route)];
  if (!item) return `path ${openApiPath(observed.route)} is not in the document`;
  const operation = item[observed.method.toLowerCase()] as Operation | undefined;
  if (!operation)
    return any.methodNotAllowed.includes(status)
      ? undefined
      : `${observed.method} is not an operation of ${openApiPath(observed.route)}`;
  if (operation.responses[status] !== undefined || operation.responses.default !== undefined) return undefined;
  return `${observed.method} ${openApiPath(observed.route)} does not document status ${status}`;
}

/**
 * Checks gateway `request` log lines (`method`, `route`, `status`) against the document; returns one
 * line per distinct undescribed response. Lines without a route template (the router's) are skipped.
 */
export function undescribedResponses(doc: OpenApiDocument, lines: Iterable<Record<string, unknown>>): string[] {
  const problems = new Set<string>();
  for (const line of lines) {
    if (
      line.msg !== 'request' ||
      typeof line.route !== 'string' ||
      typeof line.method !== 'string' ||
      typeof line.status !== 'number'
    )
      continue;
    const why = whyUndescribed(doc, { method: line.method, route: line.route, status: line.status });
    if (why) problems.add(`${line.method} ${line.route} → ${line.status}: ${why}`);
  }
  return [...problems].sort();
}
