/**
 * `value` as JSON text PostgreSQL's jsonb takes (pure). JSON can carry half a surrogate pair (a
 * client may send `"\ud800"`), which JSON.stringify writes back as that escape and jsonb refuses:
 * an insert of a client's text would fail as ours. Such halves become U+FFFD, as a text column
 * reads them; an escaped backslash is skipped whole, so `\\ud800` (a backslash, then text) stays.
 */
const BACKSLASH_OR_LONE_SURROGATE = /\\\\|\\ud[89a-f][0-9a-f]{2}/g;

export function jsonbText(value: unknown): string {
  return JSON.stringify(value).replace(BACKSLASH_OR_LONE_SURROGATE, (m) => (m === '\\\\' ? m : '\\ufffd'));
}
