/**
 * A caller's value quoted into an error message, bounded: the message is answered and logged, and
 * what stands where a name belongs may be as long as the route's size bound lets through (a path,
 * a query parameter, a body), so only its first MAX_QUOTED_CHARS characters are quoted, with its
 * length. A value that is no string is shown as JSON (`undefined` as such), bounded alike.
 */
export const MAX_QUOTED_CHARS = 128;

export function quoted(value: unknown, max = MAX_QUOTED_CHARS): string {
  if (typeof value !== 'string') {
    const shown = String(JSON.stringify(value) ?? value);
    return shown.length <= max ? shown : `${shown.slice(0, max)}… (${shown.length} characters)`;
  }
  if (value.length <= max) return JSON.stringify(value);
  return `${JSON.stringify(value.slice(0, max))}… (${value.length} characters)`;
}

/** `text` as it is (unquoted: a key path, a rule name), bounded as `quoted` bounds it. */
export function clipped(text: string, max = MAX_QUOTED_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}
