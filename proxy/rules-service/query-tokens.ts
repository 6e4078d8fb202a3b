/**
 * The token the rules service requires on `POST /api/v1/rules/query`, and after a rotation the
 * previous one, still accepted for a bounded grace (ARKVORY_RULES_SERVICE_TOKEN_GRACE_SECONDS) so
 * the gateways can be given the new token meanwhile. Pure: every time is passed in (monotonic ms).
 * Only one previous token is kept: a second rotation within the grace ends the first one's.
 */
import { timingSafeEqual } from 'node:crypto';

export class QueryTokens {
  #current: string | undefined;
  #previous: string | undefined;
  #previousUntilMs = Number.NEGATIVE_INFINITY;
  readonly #graceMs: number;

  constructor(token: string | undefined, graceMs: number) {
    this.#current = token;
    this.#graceMs = graceMs;
  }

  /** Whether the query route asks for a token at all. */
  get required(): boolean {
    return this.#current !== undefined;
  }

  /** Takes `next` as the token; the one it replaces stays accepted until `nowMs` + the grace. */
  rotate(next: string | undefined, nowMs: number): void {
    if (next === this.#current) return;
    this.#previous = this.#current;
    this.#previousUntilMs = nowMs + this.#graceMs;
    this.#current = next;
  }

  /** Until when (exclusive, on the clock `rotate` was given) the previous token is accepted; undefined: none is. */
  previousAcceptedUntil(nowMs: number): number | undefined {
    return this.#previous !== undefined && nowMs < this.#previousUntilMs ? this.#previousUntilMs : undefined;
  }

  /** Whether an `Authorization` header carries a token accepted at `nowMs`. */
  accepts(header: unknown, nowMs: number): boolean {
    if (this.#current === undefined) return true;
    if (typeof header !== 'string' || !header.startsWith('Bearer ')) return false;
    const given = Buffer.from(header.slice(7));
    // Both compared always, so the time taken does not tell which one matched.
    const current = matches(given, this.#current);
    const previous = this.#previous !== undefined && matches(given, this.#previous);
    return current || (previous && nowMs < this.#previousUntilMs);
  }
}

function matches(given: Buffer, token: string): boolean {
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
