/**
 * Pure conditional-request evaluation (RFC 9110 §13) for immutable content with a strong ETag and
 * a Last-Modified time. Times are arguments; nothing here reads a clock.
 */
export interface Validators {
  /** Strong entity tag including the quotes, e.g. `"9f86d0…"`. */
  readonly etag: string;
  /** Last-Modified in ms since the epoch; compared at one-second resolution, as HTTP dates are. */
  readonly lastModifiedMs: number;
}

interface EntityTag {
  weak: boolean;
  opaque: string;
}

/**
 * Parses `#entity-tag` (or `*`). Returns undefined when the list is malformed, so the caller can
 * ignore the header. Commas may appear inside quotes, so this scans instead of splitting.
 */
export function parseEntityTags(value: string): EntityTag[] | '*' | undefined {
  const text = value.trim();
  if (text === '*') return '*';
  const tags: EntityTag[] = [];
  let i = 0;
  // Past the end text[i] is undefined, which no character test below matches.
  for (;;) {
    while (text[i] === ' ' || text[i] === '\t' || text[i] === ',') i++;
    if (i >= text.length) break;
    let weak = false;
    if (text.startsWith('W/', i)) {
      weak = true;
      i += 2;
    }
    if (text[i] !== '"') return undefined;
    const close = text.indexOf('"', i + 1);
    if (close === -1) return undefined;
    tags.push({ weak, opaque: text.slice(i, close + 1) });
    i = close + 1;
    while (text[i] === ' ' || text[i] === '\t') i++;
    if (i < text.length && text[i] !== ',') return undefined;
  }
  return tags.length > 0 ? tags : undefined;
}

/** An HTTP-date → ms, or undefined when it does not parse. */
export function parseHttpDate(value: string): number | undefined {
  const ms = Date.parse(value);
  return Number.isFinite(ms) ? ms : undefined;
}

function seconds(ms: number): number {
  return Math.floor(ms / 1000);
}

/**
 * GET/HEAD preconditions: `If-None-Match` (weak comparison; `*` matches) and, only when that is
 * absent, `If-Modified-Since`. Returns `not_modified` for a 304, otherwise `proceed`.
 */
export function evaluateReadPreconditions(
  headers: { ifNoneMatch?: string; ifModifiedSince?: string },
  validators: Validators,
): 'not_modified' | 'proceed' {
  if (headers.ifNoneMatch !== undefined) {
    const tags = parseEntityTags(headers.ifNoneMatch);
    if (tags === '*') return 'not_modified';
    if (tags === undefined) return 'proceed';
    return tags.some((t) => t.opaque === validators.etag) ? 'not_modified' : 'proceed';
  }
  if (headers.ifModifiedSince !== undefined) {
    const since = parseHttpDate(headers.ifModifiedSince);
    if (since !== undefined && seconds(validators.lastModifiedMs) <= seconds(since)) return 'not_modified';
  }
  return 'proceed';
}

/**
 * `If-Range`: the Range applies only when the validator still matches. An entity tag must match
 * strongly (a weak tag never does). A date never matches: Last-Modified has whole seconds, and a
 * name deleted and published again within one second keeps it, so it is not a strong validator
 * (RFC 9110 §8.8.2.2) and a resume on it could splice two versions. Absent → true.
 */
export function isIfRangeSatisfied(ifRange: string | undefined, validators: Validators): boolean {
  if (ifRange === undefined) return true;
  const tags = parseEntityTags(ifRange);
  if (tags === undefined || tags === '*' || tags.length !== 1) return false;
  return !tags[0]!.weak && tags[0]!.opaque === validators.etag;
}
