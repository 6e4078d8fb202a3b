/**
 * Console sign-in sessions. They are the instance's: one table in memory (a restart signs everyone
 * out), this process's, or with several workers the coordinating process's, which the workers reach
 * over their link (proxy/workers/remote-sessions.ts), so a request is signed in whichever worker the
 * kernel gives its connection. A session binds a random id (the HttpOnly cookie, `__Host-` prefixed
 * over https) to the admin key it was opened with and to a CSRF token the page sends back as
 * `X-CSRF-Token` on every state change. The key is kept so every console request is authenticated
 * again with it: revoking or disabling the key ends the session within the authenticator's 2 s
 * revocation bound. Time comes from the injected clock of the process that holds the table.
 *
 * Only an operator's own actions restart the idle clock (`touch`); a lookup never does. The page polls
 * its views on timers, and a poll that counted as use kept an unattended console signed in for the
 * whole absolute lifetime. What counts is decided by the console (console-module.ts): a request that
 * carries the session's CSRF token, which the page sends only on changes and on reads an operator
 * asked for, and a page load's resume.
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

/**
 * Sessions last at most 8 hours and end after 30 minutes without an operator's action by default
 * (ARKVORY_CONSOLE_IDLE_TIMEOUT_SECONDS).
 */
export const SESSION_TTL_MS = 8 * 3600_000;
export const SESSION_IDLE_MS = 30 * 60_000;
/** The instance keeps at most this many; beyond, the least recently used one is dropped. */
export const MAX_SESSIONS = 1000;

/** A live session as a lookup found it (plain data: it crosses the workers' link). */
export interface ConsoleSession {
  readonly id: string;
  readonly csrfToken: string;
  readonly principalId: string;
  readonly principalName: string;
  /** The `Authorization` value the session was opened with; never logged, never sent back. */
  readonly authorization: string;
  /**
   * Its principal's last disable as the sign-in saw it (the database's `disabled_at`, null when
   * never): a later disable voids the session. Compared with the database's own later value, never
   * with a gateway's clock, so a clock running ahead cannot let a session outlive a disable.
   */
  readonly principalDisabledAtMs: number | null;
  /** Seconds until it ends if it stays in use, as of the lookup (for the page). */
  readonly expiresInSeconds: number;
}

/** The principal a session is opened for, as the sign-in authenticated it. */
export interface SessionPrincipal {
  readonly id: string;
  readonly name: string;
  /** Its last disable (`disabled_at`), undefined when never. */
  readonly disabledAtMs?: number | undefined;
}

/**
 * Whether a principal as authenticated now was disabled since `session` was opened (re-enabling
 * restores its keys, not its sessions). Only a later disable moves `disabled_at` forward; a cache a
 * little behind the sign-in's read sees an earlier value and voids nothing.
 */
export function disabledSince(
  session: Pick<ConsoleSession, 'principalDisabledAtMs'>,
  disabledAtMs: number | undefined,
): boolean {
  return disabledAtMs !== undefined && disabledAtMs > (session.principalDisabledAtMs ?? Number.NEGATIVE_INFINITY);
}

/**
 * The instance's sessions as one process reaches them: its own table, or the coordinating process's
 * over the link (a call that fails or misses its deadline rejects with 503 `unavailable`).
 */
export interface SessionStore {
  create(principal: SessionPrincipal, authorization: string): Promise<ConsoleSession>;
  /** The live session with this id, or undefined. Never counts as use: a poll looks up too. */
  get(id: string | undefined): Promise<ConsoleSession | undefined>;
  /** Restarts the idle clock of a live session (an operator's action); an ended one stays ended. */
  touch(id: string): Promise<void>;
  delete(id: string): Promise<void>;
}

export interface SessionOptions {
  clock: Clock;
  /** Absolute lifetime of a session. */
  ttlMs: number;
  /** A session without an operator's action (`touch`) this long ends. */
  idleMs: number;
  /** Beyond this many sessions the least recently used one is dropped. */
  maxSessions: number;
  /** Source of ids and tokens (tests may fix it); default 32 random bytes, base64url. */
  randomToken?: () => string;
}

/** The console's bounds on the clock of the process that holds the table. */
export function consoleSessionOptions(clock: Clock, idleMs = SESSION_IDLE_MS): SessionOptions {
  return { clock, ttlMs: SESSION_TTL_MS, idleMs, maxSessions: MAX_SESSIONS };
}

const TOKEN = /^[A-Za-z0-9_-]{20,128}$/;

/** Whether `id` has the form of a session id (anything else is looked up nowhere). */
export function isSessionId(id: unknown): id is string {
  return typeof id === 'string' && TOKEN.test(id);
}

interface Held extends Omit<ConsoleSession, 'expiresInSeconds'> {
  /** Monotonic deadline; the session also ends after `idleMs` without an operator's action. */
  readonly expiresAtMonotonicMs: number;
  lastActionMonotonicMs: number;
}

/** The table itself: held by exactly one process of an instance. */
export class ConsoleSessions {
  readonly #options: SessionOptions;
  readonly #byId = new Map<string, Held>();
  readonly #token: () => string;

  constructor(options: SessionOptions) {
    this.#options = options;
    this.#token = options.randomToken ?? (() => randomBytes(32).toString('base64url'));
  }

  create(principal: SessionPrincipal, authorization: string): ConsoleSession {
    const now = this.#options.clock.monotonicMs();
    this.#sweep(now);
    const held: Held = {
      id: this.#token(),
      csrfToken: this.#token(),
      principalId: principal.id,
      principalName: principal.name,
      authorization,
      principalDisabledAtMs: principal.disabledAtMs ?? null,
      expiresAtMonotonicMs: now + this.#options.ttlMs,
      lastActionMonotonicMs: now,
    };
    this.#byId.set(held.id, held);
    while (this.#byId.size > this.#options.maxSessions) this.#byId.delete(this.#byId.keys().next().value!);
    return this.#view(held, now);
  }

  /** The live session with this id, or undefined; any other value finds nothing. Not a use. */
  get(id: unknown): ConsoleSession | undefined {
    const now = this.#options.clock.monotonicMs();
    const held = this.#live(id, now);
    return held && this.#view(held, now);
  }

  /** An operator's action on a live session: its idle clock starts again. Nothing for an ended one. */
  touch(id: unknown): void {
    const now = this.#options.clock.monotonicMs();
    const held = this.#live(id, now);
    if (!held) return;
    held.lastActionMonotonicMs = now;
    // Re-insert: the Map's order is least recently used first.
    this.#byId.delete(held.id);
    this.#byId.set(held.id, held);
  }

  delete(id: unknown): void {
    if (typeof id === 'string') this.#byId.delete(id);
  }

  get size(): number {
    return this.#byId.size;
  }

  /** The held session if live; an ended one is dropped. */
  #live(id: unknown, now: number): Held | undefined {
    if (!isSessionId(id)) return undefined;
    const held = this.#byId.get(id);
    if (!held) return undefined;
    if (this.#isLive(held, now)) return held;
    this.#byId.delete(id);
    return undefined;
  }

  #view(held: Held, now: number): ConsoleSession {
    const { expiresAtMonotonicMs, lastActionMonotonicMs: _, ...session } = held;
    return { ...session, expiresInSeconds: Math.max(0, Math.floor((expiresAtMonotonicMs - now) / 1000)) };
  }

  #isLive(held: Held, now: number): boolean {
    return now < held.expiresAtMonotonicMs && now - held.lastActionMonotonicMs < this.#options.idleMs;
  }

  #sweep(now: number): void {
    for (const [id, held] of this.#byId) if (!this.#isLive(held, now)) this.#byId.delete(id);
  }
}

/** A single process's sessions: its own table, no link. */
export function localSessionStore(table: ConsoleSessions): SessionStore {
  return {
    create: async (principal, authorization) => table.create(principal, authorization),
    get: async (id) => table.get(id),
    touch: async (id) => table.touch(id),
    delete: async (id) => table.delete(id),
  };
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
 * prefix demands Path=/); over plain HTTP the plain name, only under the console: `<prefix>/console`,
 * `prefix` being the path the browser reaches the gateway under (`/arkvory` behind a proxy that
 * publishes it there, else ''), since a browser sends a cookie only to paths under its Path. No
 * Max-Age or Expires: the browser keeps it in memory only, so closing it signs out (a persistent
 * cookie was written to the profile on disk and resumed by whoever opened the browser next); the
 * table ends it at its bounds.
 */
export function sessionCookie(id: string, secure: boolean, prefix = ''): string {
  return `${sessionCookieName(secure)}=${id}; ${cookieScope(secure, prefix)}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}

export function clearedSessionCookie(secure: boolean, prefix = ''): string {
  return `${sessionCookieName(secure)}=; ${cookieScope(secure, prefix)}; HttpOnly; SameSite=Strict; Max-Age=0${secure ? '; Secure' : ''}`;
}

function cookieScope(secure: boolean, prefix: string): string {
  return secure ? 'Path=/' : `Path=${prefix}/console`;
}
