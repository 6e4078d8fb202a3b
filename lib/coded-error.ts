/**
 * Errors with a stable code, and the catalogues that declare the codes. Each layer declares its codes
 * once with `defineErrors`: per code, the HTTP status of an answer carrying it, the default message
 * (what the code means, in words a client may read) and the advice an operator reads in the README.
 * The HTTP edge merges every layer's catalogue with `mergeCatalogues`, which refuses a code declared
 * twice, so each code has one meaning wherever it is raised. Callers match on `err.code`, never on
 * `instanceof` or the message.
 */

export interface ErrorEntry {
  /**
   * The HTTP status of a response with this code; `null` for a code only a command or a refused start
   * reports (it never reaches a client as such: a request that meets it answers 500 `internal`).
   */
  readonly status: number | null;
  /** What the code means; the default message of an error raised without one. */
  readonly message: string;
  /** What an operator (or a client's user) should do on seeing it. */
  readonly advice: string;
}

export interface ErrorCatalogue<C extends string = string> {
  /** The layer that declares these codes, named when two layers declare the same one. */
  readonly layer: string;
  readonly entries: Readonly<Record<C, ErrorEntry>>;
}

export type CodeOf<T> = T extends ErrorCatalogue<infer C> ? C : never;

/** A layer's codes, declared once. */
export function defineErrors<const E extends Record<string, ErrorEntry>>(
  layer: string,
  entries: E,
): ErrorCatalogue<keyof E & string> {
  return Object.freeze({ layer, entries: Object.freeze({ ...entries }) });
}

export class DuplicateErrorCodeError extends Error {
  override readonly name = 'DuplicateErrorCodeError';
  readonly code = 'duplicate_error_code';
}

/** One catalogue of every code of `catalogues`; throws naming both layers when a code is declared twice. */
export function mergeCatalogues<const Cs extends readonly ErrorCatalogue[]>(
  layer: string,
  ...catalogues: Cs
): ErrorCatalogue<CodeOf<Cs[number]>> & { readonly layerOf: Readonly<Record<CodeOf<Cs[number]>, string>> } {
  const entries: Record<string, ErrorEntry> = {};
  const layerOf: Record<string, string> = {};
  for (const catalogue of catalogues) {
    for (const [code, entry] of Object.entries(catalogue.entries) as [string, ErrorEntry][]) {
      const first = layerOf[code];
      if (first !== undefined)
        throw new DuplicateErrorCodeError(
          `error code "${code}" is declared by both ${first} and ${catalogue.layer}: one code, one meaning; raise the existing one or name a new one`,
        );
      entries[code] = entry;
      layerOf[code] = catalogue.layer;
    }
  }
  return Object.freeze({
    layer,
    entries: Object.freeze(entries) as Record<CodeOf<Cs[number]>, ErrorEntry>,
    layerOf: Object.freeze(layerOf) as Record<CodeOf<Cs[number]>, string>,
  });
}

export interface CodedErrorOptions {
  cause?: unknown;
  /** Response headers the edge copies (Retry-After, RateLimit-*, WWW-Authenticate, Allow). */
  headers?: Readonly<Record<string, string | string[]>>;
  /** Fields the JSON error body carries besides `code` and `message` (e.g. a list of `problems`). */
  details?: Readonly<Record<string, unknown>>;
}

/**
 * The base of every coded error. A layer's class passes the catalogue its codes come from, so an
 * error raised without a message says what its code means.
 */
export class CodedError<C extends string = string> extends Error {
  override readonly name: string = 'CodedError';
  readonly code: C;
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly details: Readonly<Record<string, unknown>>;
  constructor(catalogue: ErrorCatalogue<C>, code: C, message?: string, options?: CodedErrorOptions) {
    super(
      message ?? catalogue.entries[code].message,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.code = code;
    this.headers = options?.headers ?? {};
    this.details = options?.details ?? {};
  }
}
