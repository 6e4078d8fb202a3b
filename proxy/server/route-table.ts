/**
 * Pure route matching: a request path and method against route templates such as
 * `/api/v1/repositories/:repo/artifacts/:id/content`. No I/O; the server applies the result.
 */
export type HttpMethod = 'GET' | 'HEAD' | 'PUT' | 'POST' | 'DELETE' | 'PATCH' | 'OPTIONS';

export interface RouteSpec<T> {
  methods: readonly HttpMethod[];
  template: string;
  value: T;
}

export type RouteMatch<T> =
  | { kind: 'found'; route: RouteSpec<T>; params: Record<string, string> }
  | { kind: 'method_not_allowed'; template: string; allow: HttpMethod[] }
  | { kind: 'not_found' };

interface Compiled<T> {
  spec: RouteSpec<T>;
  segments: string[];
}

/** A path segment may not be empty, `.`/`..`, or contain NUL/slash once decoded. */
function decodeSegment(raw: string): string | undefined {
  let text: string;
  try {
    text = decodeURIComponent(raw);
  } catch {
    return undefined;
  }
  if (text === '' || text === '.' || text === '..' || /[\0/\\]/.test(text)) return undefined;
  return text;
}

export class RouteTable<T> {
  #routes: Compiled<T>[] = [];

  add(spec: RouteSpec<T>): this {
    const clash = this.#routes.find(
      (r) => r.spec.template === spec.template && r.spec.methods.some((m) => spec.methods.includes(m)),
    );
    if (clash) throw new Error(`route ${spec.methods.join('|')} ${spec.template} registered twice`);
    this.#routes.push({ spec, segments: spec.template.split('/').slice(1) });
    return this;
  }

  match(method: string, pathname: string): RouteMatch<T> {
    const parts = pathname.split('/').slice(1);
    const allow = new Set<HttpMethod>();
    let template: string | undefined;
    for (const route of this.#routes) {
      const params = matchSegments(route.segments, parts);
      if (!params) continue;
      if ((route.spec.methods as readonly string[]).includes(method))
        return { kind: 'found', route: route.spec, params };
      template ??= route.spec.template;
      for (const m of route.spec.methods) allow.add(m);
    }
    if (template !== undefined) return { kind: 'method_not_allowed', template, allow: [...allow] };
    return { kind: 'not_found' };
  }

  get routes(): readonly RouteSpec<T>[] {
    return this.#routes.map((r) => r.spec);
  }
}

function matchSegments(template: string[], parts: string[]): Record<string, string> | undefined {
  if (template.length !== parts.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < template.length; i++) {
    const t = template[i]!;
    const p = parts[i]!;
    if (t.startsWith(':')) {
      const value = decodeSegment(p);
      if (value === undefined) return undefined;
      params[t.slice(1)] = value;
    } else if (t !== p) {
      return undefined;
    }
  }
  return params;
}
