/**
 * The token the rules service requires on `POST /api/v1/rules/query`, and after a rotation the
 * previous one, still accepted for a bounded grace (ARKVORY_RULES_SERVICE_TOKEN_GRACE_SECONDS) so
 * the gateways can be given the new token meanwhile. Pure: every time is passed in (monotonic ms).
 * Only one previous token is kept: a second rotation within the grace ends the first one's.
 *
 * The scheme is matched as RFC 9110 §11.1 says, without regard to case (`bearer`, `BEARER`), with
 * one or more blanks after it. Tokens are compared as SHA-256 digests, always 32 bytes: comparing
 * the raw values stopped at once on a length that differed, so the time taken told the token's length.
 */
import { hash, timingSafeEqual } from 'node:crypto';

/** The scheme, its blanks, then the token whole (a configured token may hold a blank). */
const BEARER = /^Bearer +(.+)$/i;

const digest = (text: string): Buffer => hash('sha256', text, 'buffer');

export class QueryTokens {
  #current: Buffer | undefined;
  #previous: Buffer | undefined;
  #previousUntilMs = Number.NEGATIVE_INFINITY;
  readonly #graceMs: number;

  /** `token` undefined: the route is open (ARKVORY_RULES_SERVICE_TOKEN unset, on purpose). */
  constructor(token: string | undefined, graceMs: number) {
    this.#current = token === undefined ? undefined : digest(token);
    this.#graceMs = graceMs;
  }

  /** Whether the query route asks for a token at all. */
  get required(): boolean {
    return this.#current !== undefined;
  }

  /**
   * Takes `next` as the token; the one it replaces stays accepted until `nowMs` + the grace. A
   * rotation never opens the route: `next` undefined or empty (a token setting gone on a reload) is
   * not taken, and false says so; the tokens in use stay as they were.
   */
  rotate(next: string | undefined, nowMs: number): boolean {
    if (next === undefined || next === '') return false;
    const nextDigest = digest(next);
    if (this.#current !== undefined && timingSafeEqual(nextDigest, this.#current)) return true;
    this.#previous = this.#current;
    this.#previousUntilMs = nowMs + this.#graceMs;
    this.#current = nextDigest;
    return true;
  }

  /** Until when (exclusive, on the clock `rotate` was given) the previous token is accepted; undefined: none is. */
  previousAcceptedUntil(nowMs: number): number | undefined {
    return this.#previous !== undefined && nowMs < this.#previousUntilMs ? this.#previousUntilMs : undefined;
  }

  /** Whether an `Authorization` header carries a token accepted at `nowMs`. */
  accepts(header: unknown, nowMs: number): boolean {
    if (this.#current === undefined) return true;
    const match = typeof header === 'string' ? BEARER.exec(header) : null;
    // A digest even of nothing: a malformed header costs what a wrong token does.
    const given = digest(match?.[1] ?? '');
    // Both compared always, so the time taken does not tell which one matched.
    const current = timingSafeEqual(given, this.#current);
    const previous = this.#previous !== undefined && timingSafeEqual(given, this.#previous);
    return match !== null && (current || (previous && nowMs < this.#previousUntilMs));
  }
}
