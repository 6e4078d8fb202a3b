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
  /** Indexes of the literal segments, checked before any parameter is decoded. */
  literals: number[];
  /** The parameter's name at each parameter segment (without its `:`), undefined at literals. */
  names: (string | undefined)[];
}

/** A path segment may not be empty, `.`/`..`, or contain NUL/slash once decoded. */
function decodeSegment(raw: string): string | undefined {
  let text = raw;
  if (raw.includes('%')) {
    try {
      text = decodeURIComponent(raw);
    } catch {
      return undefined;
    }
  }
  if (text === '' || text === '.' || text === '..' || /[\0/\\]/.test(text)) return undefined;
  return text;
}

export class RouteTable<T> {
  #routes: Compiled<T>[] = [];
  /** Routes by segment count, in registration order: a path is only compared with its own length. */
  #byLength = new Map<number, Compiled<T>[]>();

  add(spec: RouteSpec<T>): this {
    const clash = this.#routes.find(
      (r) => r.spec.template === spec.template && r.spec.methods.some((m) => spec.methods.includes(m)),
    );
    if (clash) throw new Error(`route ${spec.methods.join('|')} ${spec.template} registered twice`);
    const segments = spec.template.split('/').slice(1);
    const literals = segments.flatMap((t, i) => (t.startsWith(':') ? [] : [i]));
    const names = segments.map((t) => (t.startsWith(':') ? t.slice(1) : undefined));
    const compiled = { spec, segments, literals, names };
    this.#routes.push(compiled);
    const same = this.#byLength.get(segments.length);
    if (same) same.push(compiled);
    else this.#byLength.set(segments.length, [compiled]);
    return this;
  }

  match(method: string, pathname: string): RouteMatch<T> {
    const parts = pathname.split('/').slice(1);
    let allow: Set<HttpMethod> | undefined;
    let template: string | undefined;
    for (const route of this.#byLength.get(parts.length) ?? []) {
      const params = matchSegments(route, parts);
      if (!params) continue;
      if ((route.spec.methods as readonly string[]).includes(method))
        return { kind: 'found', route: route.spec, params };
      template ??= route.spec.template;
      allow ??= new Set();
      for (const m of route.spec.methods) allow.add(m);
    }
    if (template !== undefined) return { kind: 'method_not_allowed', template, allow: [...allow!] };
    return { kind: 'not_found' };
  }

  get routes(): readonly RouteSpec<T>[] {
    return this.#routes.map((r) => r.spec);
  }
}

function matchSegments<T>(route: Compiled<T>, parts: string[]): Record<string, string> | undefined {
  const template = route.segments;
  if (template.length !== parts.length) return undefined;
  for (const i of route.literals) if (template[i] !== parts[i]) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < template.length; i++) {
    const name = route.names[i];
    if (name === undefined) continue;
    const value = decodeSegment(parts[i]!);
    if (value === undefined) return undefined;
    params[name] = value;
  }
  return params;
}
