/**
 * JSON text read from outside (a request body, a rules service's answer) with a bound on how deeply
 * its arrays and objects nest, checked on the text before it is parsed. Pure.
 *
 * V8's JSON.parse takes any depth, but what walks the value afterwards recursively does not: a
 * reviver, JSON.stringify (a validation message quoting the value), PostgreSQL's jsonb input. A
 * `[[[…]]]` a few thousand levels deep overflowed the stack there, so the same body was a 400 "not
 * valid JSON", a 400 quoting the whole value or, in a rules-service answer, an `error` where it is
 * `invalid`. No body of any route, nor any answer, nests past a handful of levels: the bound leaves
 * room and refuses the rest for one linear pass over the text, before anything is built from it.
 */

/** The deepest nesting of arrays and objects accepted: `{"a":[1]}` is 2 levels deep. */
export const MAX_JSON_DEPTH = 64;

export class JsonTooDeepError extends Error {
  override readonly name = 'JsonTooDeepError';
  readonly code = 'json_too_deep';
  readonly maxDepth: number;
  constructor(maxDepth: number) {
    super(`JSON nested deeper than ${maxDepth} levels of arrays and objects`);
    this.maxDepth = maxDepth;
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;

/**
 * Whether `text` opens more than `maxDepth` arrays or objects inside one another; brackets within
 * strings do not count. One pass, nothing allocated; text that is not JSON is left to JSON.parse.
 */
export function nestsDeeperThan(text: string, maxDepth: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return false;
}

/**
 * JSON.parse of `text` unless it nests deeper than `maxDepth`: throws `JsonTooDeepError` then
 * (before parsing), else what JSON.parse throws (a SyntaxError).
 */
export function parseBoundedJson(
  text: string,
  reviver?: (this: unknown, key: string, value: unknown) => unknown,
  maxDepth = MAX_JSON_DEPTH,
): unknown {
  if (nestsDeeperThan(text, maxDepth)) throw new JsonTooDeepError(maxDepth);
  return JSON.parse(text, reviver);
}
