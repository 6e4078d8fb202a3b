/**
 * Console sign-in sessions, held in the writer's memory only (a restart signs everyone out).
 * A session binds a random id (the HttpOnly cookie, `__Host-` prefixed over https) to the admin key it was opened with and to a
 * CSRF token the page sends back as `X-CSRF-Token` on every state change. The key is kept so every
 * console request is authenticated again with it: revoking or disabling the key ends the session
 * within the authenticator's 2 s revocation bound. Time comes from the injected clock.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../../policy/clock.ts';

/** The session cookie's name over plain HTTP (browsers refuse a `__Host-` cookie without `Secure`). */
export const SESSION_COOKIE = 'arkvory_console';
/**
 * Its name when it is `Secure`: the browser keeps a `__Host-` cookie only if it came over https with
 * Path=/ and no Domain, so a sibling subdomain or a plain-HTTP page cannot plant or overwrite it.
 */
export const SECURE_SESSION_COOKIE = `__Host-${SESSION_COOKIE}`;
export const CSRF_HEADER = 'x-csrf-token';

export interface ConsoleSession {
  readonly id: string;
  readonly csrfToken: string;
  readonly principalId: string;
  readonly principalName: string;
  /** The `Authorization` value the session was opened with; never logged, never sent back. */
  readonly authorization: string;
  /** Wall time it was opened: a session older than its principal's last disable is void. */
  readonly issuedAtWallMs: number;
  /** Monotonic deadline; the session also ends after `idleMs` without a request. */
  readonly expiresAtMonotonicMs: number;
  lastSeenMonotonicMs: number;
}

export interface SessionOptions {
  clock: Clock;
  /** Absolute lifetime of a session. */
  ttlMs: number;
  /** A session unused this long ends. */
  idleMs: number;
  /** Beyond this many sessions the least recently used one is dropped. */
  maxSessions: number;
  /** Source of ids and tokens (tests may fix it); default 32 random bytes, base64url. */
  randomToken?: () => string;
}

const TOKEN = /^[A-Za-z0-9_-]{20,128}$/;

export class ConsoleSessions {
  readonly #options: SessionOptions;
  readonly #byId = new Map<string, ConsoleSession>();
  readonly #token: () => string;

  constructor(options: SessionOptions) {
    this.#options = options;
    this.#token = options.randomToken ?? (() => randomBytes(32).toString('base64url'));
  }

  create(principal: { id: string; name: string }, authorization: string): ConsoleSession {
    const now = this.#options.clock.monotonicMs();
    this.#sweep(now);
    const session: ConsoleSession = {
      id: this.#token(),
      csrfToken: this.#token(),
      principalId: principal.id,
      principalName: principal.name,
      authorization,
      issuedAtWallMs: this.#options.clock.wallMs(),
      expiresAtMonotonicMs: now + this.#options.ttlMs,
      lastSeenMonotonicMs: now,
    };
    this.#byId.set(session.id, session);
    while (this.#byId.size > this.#options.maxSessions) this.#byId.delete(this.#byId.keys().next().value!);
    return session;
  }

  /** The live session with this id (and marks it used), or undefined. */
  get(id: string | undefined): ConsoleSession | undefined {
    if (id === undefined || !TOKEN.test(id)) return undefined;
    const session = this.#byId.get(id);
    if (!session) return undefined;
    const now = this.#options.clock.monotonicMs();
    if (!this.#isLive(session, now)) {
      this.#byId.delete(id);
      return undefined;
    }
    session.lastSeenMonotonicMs = now;
    // Re-insert: the Map's order is least recently used first.
    this.#byId.delete(id);
    this.#byId.set(id, session);
    return session;
  }

  delete(id: string): void {
    this.#byId.delete(id);
  }

  /** Seconds until the session ends if it stays in use (for the page). */
  remainingSeconds(session: ConsoleSession): number {
    return Math.max(0, Math.floor((session.expiresAtMonotonicMs - this.#options.clock.monotonicMs()) / 1000));
  }

  get size(): number {
    return this.#byId.size;
  }

  #isLive(session: ConsoleSession, now: number): boolean {
    return now < session.expiresAtMonotonicMs && now - session.lastSeenMonotonicMs < this.#options.idleMs;
  }

  #sweep(now: number): void {
    for (const [id, session] of this.#byId) if (!this.#isLive(session, now)) this.#byId.delete(id);
  }
}

/** Constant-time comparison of the header a request sent with the session's token. */
export function csrfMatches(session: ConsoleSession, sent: string | string[] | undefined): boolean {
  if (typeof sent !== 'string') return false;
  const a = Buffer.from(sent);
  const b = Buffer.from(session.csrfToken);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The value of one cookie in a `Cookie` header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * The one name a session cookie has on a request: the `__Host-` one when the cookie is `Secure`
 * (https), else the plain one. Never both: accepting the plain name over https would let a tossed
 * cookie stand in for the prefixed one.
 */
export function sessionCookieName(secure: boolean): string {
  return secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
}

/** The session id a request carries under the name its transport allows (see `sessionCookieName`). */
export function readSessionId(header: string | undefined, secure: boolean): string | undefined {
  return readCookie(header, sessionCookieName(secure));
}

/**
 * `Set-Cookie` for a session: HttpOnly, SameSite=Strict. Over https `__Host-…; Path=/; Secure` (the
 * prefix demands Path=/); over plain HTTP the plain name, only under /console.
 */
export function sessionCookie(id: string, maxAgeSeconds: number, secure: boolean): string {
  return `${sessionCookieName(secure)}=${id}; ${cookieScope(secure)}; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${secure ? '; Secure' : ''}`;
}

export function clearedSessionCookie(secure: boolean): string {
  return `${sessionCookieName(secure)}=; ${cookieScope(secure)}; HttpOnly; SameSite=Strict; Max-Age=0${secure ? '; Secure' : ''}`;
}

function cookieScope(secure: boolean): string {
  return secure ? 'Path=/' : 'Path=/console';
}
