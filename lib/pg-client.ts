/**
 * pg's Client holding to libpq's `require_auth` connection parameter, which pg itself ignores. The
 * embedded PostgreSQL's URL asks for `scram-sha-256`: once that server is gone its port is any local
 * account's, and pg answers a server asking for the password in clear text (or takes one that asks
 * for none). With SCRAM the password never crosses the wire and the server must prove it knows it.
 * An operator's ARKVORY_DATABASE_URL may carry the parameter too, with libpq's meaning.
 */
import pg from 'pg';

/** The methods libpq's `require_auth` names (pg speaks the first four). */
const METHODS = ['password', 'md5', 'scram-sha-256', 'none', 'gss', 'sspi'] as const;
export type AuthMethod = (typeof METHODS)[number];

/** What `require_auth` lets a server do: every method but those listed, or only those. */
export interface AuthRequirement {
  readonly methods: ReadonlySet<AuthMethod>;
  readonly negated: boolean;
}

export class RequireAuthError extends Error {
  readonly code = 'database_auth_refused';
}

/**
 * `require_auth`'s value, as libpq reads it: a comma-separated list of methods, or of `!method`
 * exclusions (not both). Undefined when absent: any method, or none, is taken.
 */
export function parseRequireAuth(value: string | null | undefined): AuthRequirement | undefined {
  if (value === null || value === undefined) return undefined;
  const items = value.split(',').map((item) => item.trim());
  const negated = items[0]?.startsWith('!') ?? false;
  const methods = new Set<AuthMethod>();
  for (const item of items) {
    if (item.startsWith('!') !== negated) {
      throw new RequireAuthError('require_auth cannot mix methods and !methods (as libpq)');
    }
    const name = negated ? item.slice(1) : item;
    if (!(METHODS as readonly string[]).includes(name)) {
      throw new RequireAuthError(`require_auth names an unknown method (one of ${METHODS.join(', ')}, or !method)`);
    }
    methods.add(name as AuthMethod);
  }
  return { methods, negated };
}

/** Whether a server authenticating with `method` may be logged in to. */
export function allows(requirement: AuthRequirement | undefined, method: AuthMethod): boolean {
  if (requirement === undefined) return true;
  return requirement.methods.has(method) !== requirement.negated;
}

/** The requirement in a connection string, if it is a URL that has one. */
export function requirementOf(connectionString: string | undefined): AuthRequirement | undefined {
  if (connectionString === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(connectionString);
  } catch {
    return undefined;
  }
  return parseRequireAuth(url.searchParams.get('require_auth'));
}

/** pg's own handlers of the authentication exchange, not in its types. */
interface ClientInternals {
  connection: { emit(event: 'error', err: Error): void; stream: { destroy(): void } };
  _connecting: boolean;
  saslSession: unknown;
  _handleAuthCleartextPassword(msg: unknown): void;
  _handleAuthMD5Password(msg: unknown): void;
  _handleAuthSASL(msg: unknown): void;
  _handleAuthSASLFinal(msg: unknown): void;
  _handleReadyForQuery(msg: unknown): void;
}

const base = pg.Client.prototype as unknown as ClientInternals;

/** A pg Client that refuses, before it answers, a server authenticating in a way `require_auth` excludes. */
export class PgClient extends pg.Client {
  readonly #requirement: AuthRequirement | undefined;
  /** The method the server asked for, once it asked. */
  #method: AuthMethod | undefined;
  /** The server proved it knows the password (SCRAM's final message checked). */
  #proven = false;

  constructor(config?: string | pg.ClientConfig) {
    super(config);
    this.#requirement = requirementOf(typeof config === 'string' ? config : config?.connectionString);
  }

  _handleAuthCleartextPassword(msg: unknown): void {
    if (this.#admit('password')) base._handleAuthCleartextPassword.call(this, msg);
  }

  _handleAuthMD5Password(msg: unknown): void {
    if (this.#admit('md5')) base._handleAuthMD5Password.call(this, msg);
  }

  _handleAuthSASL(msg: unknown): void {
    if (this.#admit('scram-sha-256')) base._handleAuthSASL.call(this, msg);
  }

  _handleAuthSASLFinal(msg: unknown): void {
    base._handleAuthSASLFinal.call(this, msg);
    // pg clears the session only once the server's signature checked out.
    if ((this as unknown as ClientInternals).saslSession === null) this.#proven = true;
  }

  _handleReadyForQuery(msg: unknown): void {
    const internals = this as unknown as ClientInternals;
    if (internals._connecting && this.#requirement !== undefined) {
      // No challenge at all is libpq's `none`; a SCRAM exchange the server never finished is not one.
      if (this.#method === undefined && !this.#admit('none')) return;
      if (this.#method === 'scram-sha-256' && !this.#proven) {
        this.#refuse('the server ended SCRAM authentication without proving it knows the password');
        return;
      }
    }
    base._handleReadyForQuery.call(this, msg);
  }

  #admit(method: AuthMethod): boolean {
    this.#method ??= method;
    if (allows(this.#requirement, method)) return true;
    this.#refuse(
      `the server asked for ${method === 'none' ? 'no' : method} authentication, which require_auth excludes`,
    );
    return false;
  }

  /** Fails the connect with the reason and closes the socket, having sent the server nothing more. */
  #refuse(reason: string): void {
    const { connection } = this as unknown as ClientInternals;
    connection.emit('error', new RequireAuthError(reason));
    connection.stream.destroy();
  }
}
