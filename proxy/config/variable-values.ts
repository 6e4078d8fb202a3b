/**
 * Reads every ARKVORY_* variable against the table (variables.ts): unknown names, empty secrets and
 * values of the wrong kind become problem lines; the rest are parsed into typed values.
 */
import { CLIENT_VARIABLE_NAMES } from '../../client/environment.ts';
import { redactUrl } from '../../lib/redact-url.ts';
import { isPlaceholderSecret } from './placeholder-secrets.ts';
import { VARIABLES, type VariableKind, type VariableSpec } from './variables.ts';

/** Variables the test harness reads; they configure the tests, never a gateway. */
const IGNORED_PREFIXES = ['ARKVORY_TEST_'];
/**
 * The client commands' own variables (`ARKVORY_URL`, `ARKVORY_KEY`, …): set in a shell that also
 * runs server commands, they are someone else's, not typos.
 */
const IGNORED_NAMES: ReadonlySet<string> = new Set(CLIENT_VARIABLE_NAMES);

/** Whether an ARKVORY_* name is read by something other than the server (the tests, the client). */
function isOthersVariable(name: string): boolean {
  // Stryker disable next-line MethodExpression: equivalent while there is one prefix (`every` = `some`)
  return IGNORED_NAMES.has(name) || IGNORED_PREFIXES.some((p) => name.startsWith(p));
}

function describeKind(kind: VariableKind): string {
  switch (kind.type) {
    case 'int':
      return `${kind.auto ? '`auto` or ' : ''}an integer from ${kind.min} to ${kind.max}`;
    case 'enum':
      return `one of ${kind.values.join('|')}`;
    case 'string':
      return 'a non-empty string';
    case 'url':
      return `a URL with scheme ${kind.protocols.map((p) => p.replace(':', '://')).join(' or ')}`;
    case 'url-list':
      return `a URL with scheme ${kind.protocols.map((p) => p.replace(':', '://')).join(' or ')}, or a comma-separated list of them`;
    case 'bool':
      return '1/0/true/false';
  }
}

export function describeAllowed(spec: VariableSpec): string {
  return describeKind(spec.kind);
}

function parseValue(spec: VariableSpec, raw: string): { ok: true; value: string | number | boolean } | { ok: false } {
  const kind = spec.kind;
  switch (kind.type) {
    case 'int': {
      if (kind.auto && raw === 'auto') return { ok: true, value: raw };
      if (!/^(0|[1-9][0-9]*)$/.test(raw)) return { ok: false };
      const n = Number(raw);
      if (!Number.isSafeInteger(n) || n < kind.min || n > kind.max) return { ok: false };
      return { ok: true, value: n };
    }
    case 'enum':
      return kind.values.includes(raw) ? { ok: true, value: raw } : { ok: false };
    case 'string':
      // Never empty here: an empty value means the default, and no default is empty.
      return raw.includes('\0') ? { ok: false } : { ok: true, value: raw };
    case 'url': {
      try {
        const u = new URL(raw);
        return kind.protocols.includes(u.protocol) ? { ok: true, value: raw } : { ok: false };
      } catch {
        return { ok: false };
      }
    }
    case 'url-list': {
      for (const part of raw.split(',')) {
        try {
          if (!kind.protocols.includes(new URL(part.trim()).protocol)) return { ok: false };
        } catch {
          return { ok: false };
        }
      }
      return { ok: true, value: raw };
    }
    case 'bool':
      if (['1', 'true'].includes(raw)) return { ok: true, value: true };
      if (['0', 'false'].includes(raw)) return { ok: true, value: false };
      return { ok: false };
  }
}

/**
 * A value as a problem line may show it: secrets not at all, URLs without user info or query.
 * Besides the URL variables, any value with a scheme or `//` may be a misplaced URL.
 */
export function shown(spec: VariableSpec | undefined, raw: string): string {
  if (spec?.secret) return '<redacted>';
  // A list of URLs is redacted entry by entry by redactUrl itself.
  const text = spec?.kind.type === 'url' || /^\s*[A-Za-z][A-Za-z0-9+.-]*:|\/\//.test(raw) ? redactUrl(raw) : raw;
  // Cut after redacting: a cut URL does not parse, and its secret may lie past the cut.
  return JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text);
}

/** The parsed variables of one environment, and the problems found so far (later checks add theirs). */
export class VariableValues {
  readonly problems: string[] = [];
  readonly values = new Map<string, string | number | boolean | undefined>();
  /** Variables whose own value is bad: checks that need them are skipped (already reported). */
  readonly failed = new Set<string>();
  readonly known = new Map(VARIABLES.map((spec) => [spec.name, spec]));
  readonly env: Readonly<Record<string, string | undefined>>;

  constructor(env: Readonly<Record<string, string | undefined>>) {
    this.env = env;
    for (const name of Object.keys(env)) {
      if (!name.startsWith('ARKVORY_') || isOthersVariable(name)) continue;
      if (!this.known.has(name))
        this.problems.push(`${name}: unknown variable (a typo?); see the README variable table`);
    }
    for (const spec of VARIABLES) {
      const raw = env[spec.name];
      if (raw === '' && spec.refuseEmpty) {
        this.failed.add(spec.name);
        this.problems.push(
          `${spec.name}: set but empty; give a non-empty secret, or unset the variable to leave it open on purpose`,
        );
        continue;
      }
      if (raw !== undefined && spec.refusePlaceholder && isPlaceholderSecret(raw)) {
        this.failed.add(spec.name);
        this.problems.push(
          `${spec.name}: an example's placeholder (change-me…, replace-with…, <…>), which anyone who read the example could send; give a random secret (e.g. openssl rand -hex 32)`,
        );
        continue;
      }
      const text = raw === undefined || raw === '' ? spec.defaultValue : raw;
      if (text === undefined) continue;
      const parsed = parseValue(spec, text);
      if (parsed.ok) this.values.set(spec.name, parsed.value);
      else {
        this.failed.add(spec.name);
        this.problems.push(`${spec.name}: expected ${describeKind(spec.kind)}, got ${shown(spec, text)}`);
      }
    }
  }

  anyFailed(...names: string[]): boolean {
    return names.some((n) => this.failed.has(n));
  }
  num(name: string): number {
    return this.values.get(name) as number;
  }
  optNum(name: string): number | undefined {
    return this.values.get(name) as number | undefined;
  }
  str(name: string): string {
    return this.values.get(name) as string;
  }
  optStr(name: string): string | undefined {
    return this.values.get(name) as string | undefined;
  }
}
