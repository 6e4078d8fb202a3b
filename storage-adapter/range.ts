/**
 * Pure Range-header math (RFC 9110 §14). Decides whether a request gets the whole representation,
 * one or more byte ranges, or 416; never touches a file. Positions are inclusive, as on the wire.
 */
export interface ByteRange {
  readonly start: number;
  /** Inclusive. */
  readonly end: number;
}

export type RangeDecision =
  /** No usable Range header (absent, other unit, malformed or absurd): send everything with 200. */
  | { readonly kind: 'full' }
  /** One or more ranges to send with 206; several → multipart/byteranges. */
  | { readonly kind: 'partial'; readonly ranges: readonly ByteRange[] }
  /** A valid byte range set that is not satisfiable (RFC 9110 §14.1.1): 416. */
  | { readonly kind: 'unsatisfiable' };

/** More range specs than this is treated as absurd and the header is ignored (Apache's MaxRanges idea). */
export const MAX_RANGES = 100;
/**
 * Ranges closer than this are merged: a multipart part header costs about this much, so sending the
 * gap is cheaper than a new part (RFC 9110 §14.2 allows coalescing).
 */
export const COALESCE_GAP_BYTES = 80;

type Spec = { kind: 'int'; first: number; last: number | undefined } | { kind: 'suffix'; length: number };

const DIGITS = /^[0-9]+$/;

/** Digit strings longer than any file size we could hold become Infinity instead of losing precision. */
function toNumber(digits: string): number {
  const trimmed = digits.replace(/^0+(?=.)/, '');
  return trimmed.length > 15 ? Number.POSITIVE_INFINITY : Number(trimmed);
}

/** OWS (RFC 9110 §5.6.3): spaces and horizontal tabs only, not every character `trim` removes. */
const OWS_AROUND = /^[ \t]+|[ \t]+$/g;
const LEADING_OWS = /^[ \t]/;

/**
 * `ranges-specifier = range-unit "=" range-set` (RFC 9110 §14.1.1), exactly: no whitespace around
 * the `=` (`bytes = 0-1` is not a ranges-specifier, so it is ignored like any malformed one: a
 * server MAY ignore a Range it cannot parse, §14.2), and the set is a list as §5.6.1.2 has
 * recipients take it, `[ element ] *( OWS "," [ OWS element ] )`: whitespace around the commas and
 * empty elements, never before the first element.
 */
function parseSpecs(header: string): Spec[] | undefined {
  const eq = header.indexOf('=');
  // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent: without '=' (eq -1) the unit check below fails too (only a 6-character 'bytes?' passes it, and then no item parses)
  if (eq < 0) return undefined;
  // Range unit names are case-insensitive (§14.1).
  if (header.slice(0, eq).toLowerCase() !== 'bytes') return undefined;
  const specs: Spec[] = [];
  const items = header.slice(eq + 1).split(',');
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!.replace(OWS_AROUND, '');
    if (item === '') continue; // the list syntax allows empty elements
    // Before the first element the list syntax has no OWS: `bytes= 0-1` is as malformed as `bytes =0-1`.
    if (i === 0 && LEADING_OWS.test(items[i]!)) return undefined;
    if (specs.length >= MAX_RANGES) return undefined;
    const dash = item.indexOf('-');
    if (dash < 0) return undefined;
    const left = item.slice(0, dash);
    const right = item.slice(dash + 1);
    if (left === '') {
      if (!DIGITS.test(right)) return undefined;
      specs.push({ kind: 'suffix', length: toNumber(right) });
      continue;
    }
    if (!DIGITS.test(left) || (right !== '' && !DIGITS.test(right))) return undefined;
    const first = toNumber(left);
    const last = right === '' ? undefined : toNumber(right);
    if (last !== undefined && last < first) return undefined; // invalid range-spec → whole field invalid
    specs.push({ kind: 'int', first, last });
  }
  return specs.length > 0 ? specs : undefined;
}

function resolve(spec: Spec, sizeBytes: number): ByteRange | undefined {
  if (spec.kind === 'suffix') {
    // A zero-length suffix is unsatisfiable; an empty representation has no bytes to name (see decideRange).
    if (spec.length === 0 || sizeBytes === 0) return undefined;
    return { start: Math.max(0, sizeBytes - spec.length), end: sizeBytes - 1 };
  }
  if (spec.first >= sizeBytes) return undefined;
  return { start: spec.first, end: Math.min(spec.last ?? Number.POSITIVE_INFINITY, sizeBytes - 1) };
}

/** True when some two ranges overlap or sit closer than COALESCE_GAP_BYTES. */
function needsCoalescing(ranges: readonly ByteRange[]): boolean {
  const sorted = [...ranges].sort((a, b) => a.start - b.start);
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i]!.start <= sorted[i - 1]!.end + 1 + COALESCE_GAP_BYTES) return true;
  }
  return false;
}

function coalesce(ranges: readonly ByteRange[]): ByteRange[] {
  const sorted = [...ranges].sort((a, b) => a.start - b.start);
  const out: ByteRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r.start <= last.end + 1 + COALESCE_GAP_BYTES)
      out[out.length - 1] = { start: last.start, end: Math.max(last.end, r.end) };
    else out.push(r);
  }
  return out;
}

/**
 * Decides what a `Range` header asks of a representation of `sizeBytes` bytes. Unsatisfiable
 * specs are dropped; if none is left the answer is 416. Ranges that overlap or nearly touch are
 * merged into ascending order; otherwise the client's order is kept (RFC 9110 §15.3.7.2).
 */
export function decideRange(header: string | undefined, sizeBytes: number): RangeDecision {
  if (header === undefined) return { kind: 'full' };
  const specs = parseSpecs(header);
  if (!specs) return { kind: 'full' };
  const ranges = specs.map((s) => resolve(s, sizeBytes)).filter((r): r is ByteRange => r !== undefined);
  if (ranges.length === 0) {
    // A non-zero suffix is satisfiable at any size (RFC 9110 §14.1.1: of an empty representation, the
    // only satisfiable form), yet of one no 206 can say which bytes it sends: the whole, empty, body.
    if (sizeBytes === 0 && specs.some((s) => s.kind === 'suffix' && s.length > 0)) return { kind: 'full' };
    return { kind: 'unsatisfiable' };
  }
  return { kind: 'partial', ranges: needsCoalescing(ranges) ? coalesce(ranges) : ranges };
}

/** `bytes 0-99/1234` for a part or single-range response. */
export function contentRangeHeader(range: ByteRange, sizeBytes: number): string {
  return `bytes ${range.start}-${range.end}/${sizeBytes}`;
}

/** The 416 form: `bytes` then a star, a slash and the size. */
export function unsatisfiedRangeHeader(sizeBytes: number): string {
  return `bytes */${sizeBytes}`;
}

export function rangeLength(range: ByteRange): number {
  return range.end - range.start + 1;
}
