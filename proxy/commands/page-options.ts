/** `--limit` and `--cursor` of every CLI list form: one page, as the admin API gives it (policy/auth/page.ts). */
import { PAGE_DEFAULT_LIMIT, PAGE_MAX_LIMIT, type Page, type PageRequest } from '../../policy/auth/page.ts';

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

/** The page request of a list form's options. */
export function pageInput(input: { string(name: 'limit' | 'cursor'): string | undefined }): PageRequest {
  return { limit: input.string('limit'), cursor: input.string('cursor') };
}

/** `{ <name>: items, nextCursor }`, the admin API's shape. */
export const printed =
  (name: string) =>
  <T>(page: Page<T>) => ({ [name]: page.items, nextCursor: page.nextCursor });
