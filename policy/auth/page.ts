/**
 * Cursor pagination for listings (pure). A page holds at most `limit` items (default
 * `PAGE_DEFAULT_LIMIT`, at most `PAGE_MAX_LIMIT`); `nextCursor` is null on the last page, otherwise
 * opaque text to pass back as `cursor` for the next one. A cursor is the listing's name and the sort key of the last item
 * given (keyset pagination: no OFFSET, so a page costs the same wherever it starts, and rows added
 * or removed meanwhile neither repeat nor skip the others).
 */
import { decimalInteger } from '../../lib/decimal.ts';
import { PolicyError } from '../errors.ts';

export const PAGE_DEFAULT_LIMIT = 100;
export const PAGE_MAX_LIMIT = 1000;
const MAX_CURSOR_LENGTH = 1024;

/** A request for one page, as it arrives (query parameters, CLI options). */
export interface PageRequest {
  readonly limit?: unknown;
  readonly cursor?: unknown;
}

export interface Page<T> {
  readonly items: T[];
  readonly nextCursor: string | null;
}

/** The page size asked for, or the default; anything else than 1 … PAGE_MAX_LIMIT is `invalid_request`. */
export function pageLimit(raw: unknown): number {
  if (raw === undefined || raw === null || raw === '') return PAGE_DEFAULT_LIMIT;
  const n = typeof raw === 'string' ? decimalInteger(raw) : raw;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > PAGE_MAX_LIMIT)
    throw new PolicyError('invalid_request', `limit must be an integer from 1 to ${PAGE_MAX_LIMIT}`);
  return n;
}

/** The cursors of one listing: its name (each cursor carries it) and the shape of its sort key. */
export interface CursorShape {
  readonly listing: string;
  /** How many values the sort key holds. */
  readonly arity: number;
  /** Each value's shape where its column needs one (a bigint's digits), by position. */
  readonly shapes?: readonly (RegExp | undefined)[];
}

/**
 * Every paged listing's cursors. The name in a cursor tells a cursor of another listing (one with a
 * sort key of the same shape would otherwise be taken as a place in this one) from a forged one.
 */
export const CURSORS = {
  principals: { listing: 'principals', arity: 1 },
  access: { listing: 'access view', arity: 1 },
  // Microseconds fit 18 digits until the year 33658; 19 may pass a bigint, which PostgreSQL refuses with a 500.
  keys: { listing: 'keys', arity: 2, shapes: [/^[0-9]{1,18}$/] },
  certificates: { listing: 'certificate bindings', arity: 1 },
  repositories: { listing: 'repositories', arity: 1 },
  readableRepositories: { listing: 'readable repositories', arity: 1 },
  grants: { listing: 'grants', arity: 2 },
  ruleOverrides: { listing: 'rule overrides', arity: 4 },
  limiters: { listing: 'limiters', arity: 1 },
  quotas: { listing: 'quotas', arity: 2, shapes: [/^(?:repository|principal)$/] },
  groups: { listing: 'groups', arity: 1 },
  // A group's members, by principal name.
  groupMembers: { listing: 'group members', arity: 1 },
  // Usage statistics: a count (bigint digits) or a publication in microseconds, then the catalog key;
  // a principal's day, its requests, its id.
  statsTop: { listing: 'most downloaded', arity: 6, shapes: [/^[0-9]{1,19}$/] },
  statsIdle: { listing: 'not downloaded', arity: 6, shapes: [/^-?[0-9]{1,18}$/] },
  statsPrincipals: {
    listing: 'principal days',
    arity: 3,
    shapes: [
      /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/,
      /^[0-9]{1,19}$/,
      /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    ],
  },
  repositoryCeilings: { listing: 'repository ceilings', arity: 1 },
  // An id compared as a bigint (the audit trail also checks it is at most the largest one).
  audit: { listing: 'audit', arity: 1, shapes: [/^[0-9]{1,19}$/] },
} as const satisfies Record<string, CursorShape>;

const LISTINGS = new Set<string>(Object.values(CURSORS).map((c) => c.listing));

/** The cursor of `cursor`'s listing for the page after the item whose sort key is `key`. */
export function encodeCursor(cursor: Pick<CursorShape, 'listing'>, key: readonly string[]): string {
  return Buffer.from(JSON.stringify({ l: cursor.listing, k: key })).toString('base64url');
}

/** The refusal of a cursor that is not one any listing gave. */
export const invalidCursor = (): PolicyError =>
  new PolicyError('invalid_request', 'cursor is not valid: no listing gave it; start without it');

/**
 * The sort key a cursor of `cursor`'s listing carries, undefined for the first page. A cursor that
 * cannot be read, or holds what this listing's key cannot (a NUL, a value off its shape), is
 * `invalid_request` "not valid"; one another listing gave is `invalid_request` naming that listing.
 * Checked here so a forged one never reaches the database as a cast it cannot make (a 500 for the
 * client's fault), and so the CLI can refuse it before it connects.
 */
export function decodeCursor(raw: unknown, cursor: CursorShape): string[] | undefined {
  if (raw === undefined || raw === null || raw === '') return undefined;
  if (typeof raw !== 'string' || raw.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(raw)) throw invalidCursor();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw invalidCursor();
  }
  const { l: listing, k: key } = (parsed ?? {}) as { l?: unknown; k?: unknown };
  if (typeof listing !== 'string' || !LISTINGS.has(listing) || !Array.isArray(key)) throw invalidCursor();
  if (listing !== cursor.listing)
    throw new PolicyError(
      'invalid_request',
      `cursor was made for the ${listing} listing, not this one (${cursor.listing}); start without it`,
    );
  if (key.length !== cursor.arity || !key.every((k) => typeof k === 'string')) throw invalidCursor();
  // PostgreSQL refuses NUL in text; a shape given is a column's (e.g. a bigint's digits).
  const shapes: readonly (RegExp | undefined)[] = cursor.shapes ?? [];
  if (key.some((k: string, i) => k.includes('\u0000') || (shapes[i] !== undefined && !shapes[i]!.test(k))))
    throw invalidCursor();
  return key as string[];
}

/**
 * The page from rows fetched with `LIMIT limit + 1` (the extra row only says another page
 * exists); `keyOf` gives an item's sort key, `cursor` the listing.
 */
export function pageOf<T>(
  rows: T[],
  limit: number,
  cursor: Pick<CursorShape, 'listing'>,
  keyOf: (item: T) => readonly string[],
): Page<T> {
  const more = rows.length > limit;
  const items = more ? rows.slice(0, limit) : rows;
  return { items, nextCursor: more ? encodeCursor(cursor, keyOf(items[items.length - 1]!)) : null };
}
