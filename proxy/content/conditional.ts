/**
 * Pure conditional-request evaluation (RFC 9110 §13) for immutable content with a strong ETag and
 * a Last-Modified time: reads (GET, HEAD) and writes (PUT, DELETE). Times are arguments; nothing
 * here reads a clock.
 */
export interface Validators {
  /** Strong entity tag including the quotes, e.g. `"9f86d0…"`. */
  readonly etag: string;
  /** Last-Modified in ms since the epoch; compared at one-second resolution, as HTTP dates are. */
  readonly lastModifiedMs: number;
  /**
   * Another strong tag of the same version, which a write's `If-Match` and `If-None-Match` also
   * match (a name's base path: its metadata answer's tag beside its bytes' tag). Reads never use it.
   */
  readonly alsoEtag?: string | undefined;
}

/** A write's comparison: the version's tag or its other one. */
function namesVersion(opaque: string, current: Validators): boolean {
  return opaque === current.etag || opaque === current.alsoEtag;
}

interface EntityTag {
  weak: boolean;
  opaque: string;
}

/** Between an opaque-tag's quotes: `*etagc`, `etagc = %x21 / %x23-7E / obs-text` (RFC 9110 §8.8.3): no space, no control. */
const ETAGC = /^[\x21\x23-\x7e\x80-\xff]*$/;
/** OWS (RFC 9110 §5.6.3): spaces and horizontal tabs. */
const OWS_AROUND = /^[ \t]+|[ \t]+$/g;

/**
 * Parses `#entity-tag` (or `*`). Returns undefined when the list is malformed, so the caller can
 * ignore the header. Commas may appear inside quotes, so this scans instead of splitting. A list
 * of no tags (an empty value, or commas alone: `#` allows zero elements, RFC 9110 §5.6.1) is
 * well-formed and matches nothing. Only OWS is stripped (not `trim()`'s no-break or vertical space).
 */
export function parseEntityTags(value: string): EntityTag[] | '*' | undefined {
  const text = value.replace(OWS_AROUND, '');
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
    if (!ETAGC.test(text.slice(i + 1, close))) return undefined;
    tags.push({ weak, opaque: text.slice(i, close + 1) });
    i = close + 1;
    while (text[i] === ' ' || text[i] === '\t') i++;
    if (i < text.length && text[i] !== ',') return undefined;
  }
  return tags;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const MONTH = MONTHS.join('|');
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})';
/** `Sun, 06 Nov 1994 08:49:37 GMT` */
const IMF_FIXDATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\\d{2}) (${MONTH}) (\\d{4}) ${TIME} GMT$`);
/** `Sunday, 06-Nov-94 08:49:37 GMT` (obsolete) */
const RFC850_DATE = new RegExp(
  `^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\\d{2})-(${MONTH})-(\\d{2}) ${TIME} GMT$`,
);
/** `Sun Nov  6 08:49:37 1994` (obsolete) */
const ASCTIME_DATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (${MONTH}) ( \\d|\\d{2}) ${TIME} (\\d{4})$`);

function utc(
  year: number,
  month: string,
  day: string,
  hour: string,
  minute: string,
  second: string,
): number | undefined {
  const m = MONTHS.indexOf(month);
  const d = Number(day);
  // A leap second, 23:59:60 (RFC 9110 §5.6.7), is read as 23:59:59: ms since the epoch have no
  // such second, and compared at one-second resolution with a Last-Modified (which never has one)
  // it orders the same (23:59:59 is not later, 00:00:00 is). Another second 60 is no time.
  const s = second === '60' && hour === '23' && minute === '59' ? 59 : Number(second);
  const ms = Date.UTC(year, m, d, Number(hour), Number(minute), s);
  const date = new Date(ms);
  // 31 Feb, 24:00 or 00:60 are not dates (Date.UTC would roll them over; an hour past 23 moves the day).
  if (date.getUTCDate() !== d || Number(minute) > 59 || s > 59) return undefined;
  return ms;
}

/**
 * An RFC 850 date's two-digit year as of `nowMs` (RFC 9110 §5.6.7): a year more than 50 years ahead
 * is the most recent past year with those digits, so the window is the 100 years up to 50 ahead. A
 * fixed pivot (00-49 → 20xx) read `50` as 1950 in 2026, when 2050 is only 24 years ahead.
 */
function rfc850Year(twoDigits: number, nowMs: number): number {
  const nowYear = new Date(nowMs).getUTCFullYear();
  const year = nowYear - (nowYear % 100) + twoDigits;
  if (year > nowYear + 50) return year - 100;
  if (year <= nowYear - 50) return year + 100;
  return year;
}

/**
 * An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms) → ms, or
 * undefined for anything else. Not `Date.parse`: it takes `2030`, `tomorrow 2030` or a date
 * without a zone, and a precondition on such a value must be ignored, not evaluated. `nowMs` is
 * the time an RFC 850 date's two-digit year is read against.
 */
export function parseHttpDate(value: string, nowMs: number): number | undefined {
  const text = value.replace(OWS_AROUND, '');
  let m = IMF_FIXDATE.exec(text);
  if (m) return utc(Number(m[3]), m[2]!, m[1]!, m[4]!, m[5]!, m[6]!);
  m = RFC850_DATE.exec(text);
  if (m) return utc(rfc850Year(Number(m[3]), nowMs), m[2]!, m[1]!, m[4]!, m[5]!, m[6]!);
  m = ASCTIME_DATE.exec(text);
  if (m) return utc(Number(m[6]), m[1]!, m[2]!, m[3]!, m[4]!, m[5]!);
  return undefined;
}

function seconds(ms: number): number {
  return Math.floor(ms / 1000);
}

/**
 * GET/HEAD preconditions: `If-None-Match` (weak comparison; `*` matches) and, only when that is
 * absent, `If-Modified-Since`. Returns `not_modified` for a 304, otherwise `proceed`. `nowMs`: the
 * request's time, for dates with a two-digit year.
 */
export function evaluateReadPreconditions(
  headers: { ifNoneMatch?: string; ifModifiedSince?: string },
  validators: Validators,
  nowMs: number,
): 'not_modified' | 'proceed' {
  if (headers.ifNoneMatch !== undefined) {
    const tags = parseEntityTags(headers.ifNoneMatch);
    if (tags === '*') return 'not_modified';
    if (tags === undefined) return 'proceed';
    return tags.some((t) => t.opaque === validators.etag) ? 'not_modified' : 'proceed';
  }
  if (headers.ifModifiedSince !== undefined) {
    const since = parseHttpDate(headers.ifModifiedSince, nowMs);
    if (since !== undefined && seconds(validators.lastModifiedMs) <= seconds(since)) return 'not_modified';
  }
  return 'proceed';
}

/**
 * PUT/DELETE preconditions (RFC 9110 §13.2.2, steps 1 to 3) against the name's current version,
 * `current` undefined when it has none: `If-Match` (strong comparison; `*` matches any current
 * version), only without it `If-Unmodified-Since`, then `If-None-Match` (weak comparison; `*`
 * matches any current version). A malformed `If-Match` or `If-None-Match` refuses the write: the
 * client asked for a condition, and a write done without it (a DELETE of a version it never saw)
 * cannot be taken back. An empty list is no malformed one: `If-Match` with no tag holds for no
 * version, `If-None-Match` with none for every one. A value of `If-Unmodified-Since` that is not an HTTP-date is ignored (§13.1.4).
 * `nowMs`: the request's time, for dates with a two-digit year.
 */
export function evaluateWritePreconditions(
  headers: { ifMatch?: string | undefined; ifUnmodifiedSince?: string | undefined; ifNoneMatch?: string | undefined },
  current: Validators | undefined,
  nowMs: number,
): 'proceed' | 'precondition_failed' {
  if (headers.ifMatch !== undefined) {
    const tags = parseEntityTags(headers.ifMatch);
    const holds =
      tags !== undefined &&
      current !== undefined &&
      (tags === '*' || tags.some((t) => !t.weak && namesVersion(t.opaque, current)));
    if (!holds) return 'precondition_failed';
  } else if (headers.ifUnmodifiedSince !== undefined && current !== undefined) {
    const since = parseHttpDate(headers.ifUnmodifiedSince, nowMs);
    if (since !== undefined && seconds(current.lastModifiedMs) > seconds(since)) return 'precondition_failed';
  }
  if (headers.ifNoneMatch !== undefined) {
    const tags = parseEntityTags(headers.ifNoneMatch);
    if (tags === undefined) return 'precondition_failed';
    if (current !== undefined && (tags === '*' || tags.some((t) => namesVersion(t.opaque, current))))
      return 'precondition_failed';
  }
  return 'proceed';
}

/**
 * `If-Range`: the Range applies only when the validator still matches. An entity tag must match
 * strongly (a weak tag never does). A date never matches: Last-Modified has whole seconds, and
 * versions of a name published before migrations/0075 (which dates a name published again a second
 * after the deleted version) may share one, so it is not a strong validator (RFC 9110 §8.8.2.2) and
 * a resume on it could splice two versions. Absent → true.
 */
export function isIfRangeSatisfied(ifRange: string | undefined, validators: Validators): boolean {
  if (ifRange === undefined) return true;
  // `If-Range = entity-tag / HTTP-date`: one tag, not a list (`"a",` or `, "a"` is neither), and a
  // strong match is the same strong tag, character for character.
  return ifRange.replace(OWS_AROUND, '') === validators.etag;
}
