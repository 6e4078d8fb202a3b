/**
 * Cursor pagination for listings (pure). A page holds at most `limit` items (default
 * `PAGE_DEFAULT_LIMIT`, at most `PAGE_MAX_LIMIT`); `nextCursor` is null on the last page, otherwise
 * opaque text to pass back as `cursor` for the next one. A cursor is the sort key of the last item
 * given (keyset pagination: no OFFSET, so a page costs the same wherever it starts, and rows added
 * or removed meanwhile neither repeat nor skip the others).
 */
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
  const n = typeof raw === 'string' && /^[0-9]{1,7}$/.test(raw) ? Number(raw) : raw;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > PAGE_MAX_LIMIT)
    throw new PolicyError('invalid_request', `limit must be an integer from 1 to ${PAGE_MAX_LIMIT}`);
  return n;
}

/** The cursor for the page after the item whose sort key is `key`. */
export function encodeCursor(key: readonly string[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

/**
 * The sort key a cursor carries (`arity` strings, each matching its `shapes` entry when given),
 * undefined for the first page; a cursor we did not make is `invalid_request`. Checked here so a
 * forged one never reaches the database as a cast it cannot make (a 500 for the client's fault).
 */
export function decodeCursor(
  raw: unknown,
  arity: number,
  shapes: readonly (RegExp | undefined)[] = [],
): string[] | undefined {
  if (raw === undefined || raw === null || raw === '') return undefined;
  const invalid = () => new PolicyError('invalid_request', 'cursor is not one this listing gave; start without it');
  if (typeof raw !== 'string' || raw.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(raw)) throw invalid();
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
  if (!Array.isArray(key) || key.length !== arity || !key.every((k) => typeof k === 'string')) throw invalid();
  // PostgreSQL refuses NUL in text; a shape given is a column's (e.g. a bigint's digits).
  if (key.some((k: string, i) => k.includes('\u0000') || (shapes[i] !== undefined && !shapes[i]!.test(k))))
    throw invalid();
  return key as string[];
}

/**
 * The page from rows fetched with `LIMIT limit + 1` (the extra row only says another page
 * exists); `keyOf` gives an item's sort key.
 */
export function pageOf<T>(rows: T[], limit: number, keyOf: (item: T) => readonly string[]): Page<T> {
  const more = rows.length > limit;
  const items = more ? rows.slice(0, limit) : rows;
  return { items, nextCursor: more ? encodeCursor(keyOf(items[items.length - 1]!)) : null };
}
