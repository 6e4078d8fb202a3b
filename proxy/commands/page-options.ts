/** `--limit` and `--cursor` of every CLI list form: one page, as the admin API gives it (policy/auth/page.ts). */
import {
  type CursorShape,
  decodeCursor,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  pageLimit,
  type Page,
  type PageRequest,
} from '../../policy/auth/page.ts';
import { PolicyError } from '../../policy/errors.ts';
import { UsageError } from './command.ts';

export const PAGE_OPTIONS = {
  limit: {
    type: 'string',
    value: '100',
    description: `entries per page, 1 to ${PAGE_MAX_LIMIT} (default ${PAGE_DEFAULT_LIMIT})`,
  },
  cursor: {
    type: 'string',
    value: 'CURSOR',
    description: 'the nextCursor a previous page printed: the page after it',
  },
} as const;

/**
 * The page request of a list form's options, read before anything is opened: a `--limit` out of range
 * is a usage error (exit 2), as the option's spelling is, and so is a `--cursor` that is not valid or
 * was made for another listing than `cursor`'s (said as the admin API's 400 says it).
 */
export function pageInput(
  input: { string(name: 'limit' | 'cursor'): string | undefined },
  cursor: CursorShape,
): PageRequest {
  const limit = input.string('limit');
  try {
    pageLimit(limit);
  } catch (err) {
    if (err instanceof PolicyError) throw new UsageError(`--${err.message} (got ${limit})`);
    throw err;
  }
  const given = input.string('cursor');
  try {
    decodeCursor(given, cursor);
  } catch (err) {
    if (err instanceof PolicyError) throw new UsageError(`--${err.message}`);
    throw err;
  }
  return { limit, cursor: given };
}

/** `{ <name>: items, nextCursor }`, the admin API's shape. */
export const printed =
  (name: string) =>
  <T>(page: Page<T>) => ({ [name]: page.items, nextCursor: page.nextCursor });
