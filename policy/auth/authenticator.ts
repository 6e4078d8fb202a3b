/**
 * Resolves `Authorization: Bearer ark_…` (or its Basic form) to a Principal and answers grant
 * questions, with a bounded in-process cache so the common request costs no database round trip.
 *
 * Revocation bound: every change that can revoke access bumps `arkvory_auth_epoch` and NOTIFYs
 * `arkvory_auth`. The cache is cleared on NOTIFY and whenever the epoch (polled every 500 ms) moves,
 * and it is trusted only while the last successful poll is younger than 1.5 s; otherwise every
 * lookup goes to the database. So a revoked key stops working on every gateway within 2 s even when
 * notifications are lost, and a gateway that cannot reach the database answers 503, never stale.
 *
 * Unknown key ids cost no query: with the epoch the gateway loads the set of every key id (at most
 * `maxKnownKeys`, default 100,000). While the cache is trusted, an id outside the set is refused at
 * once, so a flood of random keys reaches neither PostgreSQL nor the LRU (which it would otherwise
 * wash out). Creating a key bumps the epoch, which drops the set; it is reloaded on the next poll.
 * A key used in the few milliseconds before its NOTIFY arrives is not in the set yet: such misses
 * are still looked up, but at most `recheckBurst` at once and `recheckPerSecond` after that
 * (default 10 and 5/s), so a fresh key works at once while a flood costs a handful of queries a
 * second at most; a recheck that finds the key reloads the set.
 * Past `maxKnownKeys` keys the set is not kept and every unknown id is looked up (cached per id).
 */
import type pg from 'pg';
import type { Logger } from 'pino';
import { BoundedLru } from '../../lib/bounded-lru.ts';
import { lookupFailure } from '../../lib/statement-deadline.ts';
import type { ConnectionUrl } from '../../lib/connection-url.ts';
import { EpochWatcher } from '../../lib/epoch-watcher.ts';
import type { Clock } from '../clock.ts';
import { PolicyError } from '../errors.ts';
import type { Permission } from './authorize.ts';
import { parseAuthorization, secretMatches } from './key-format.ts';
import type { GroupCeilings, Principal, RepositoryCeilings, Scope } from './principal.ts';
import { isPromise, type MaybePromise } from '../../lib/maybe-promise.ts';
import { linkPredates } from './presign-signature.ts';

interface KeyEntry {
  principalId: string;
  principalName: string;
  disabled: boolean;
  /** When the principal was last disabled (wall ms), or undefined. */
  disabledAtMs: number | undefined;
  bandwidthWeight: number;
  groupCeilings: readonly GroupCeilings[];
  secretSha256: Buffer;
  scopes: ReadonlySet<Scope>;
  expiresAtMs: number | null;
  revoked: boolean;
  /**
   * The secret last proven to hash to `secretSha256`. A repeat of it is compared in constant time
   * instead of hashed again (a SHA-256 per request would be a visible share of a small request's CPU).
   * It lives only as long as this cached entry, which any change of the key's state clears.
   */
  verifiedSecret?: string;
}

/** A principal's grant on one repository as cached. */
interface GrantEntry {
  readonly permission: Permission;
  /**
   * When the grant was last removed before it was given again (wall ms of the database's clock), or
   * undefined: a pre-signed link made before that stays void (`grantForLinkNow`).
   */
  readonly removedAtMs: number | undefined;
}

/** A certificate binding as cached: the principal a SAN list resolves to. */
interface CertificateEntry {
  san: string;
  principalId: string;
  principalName: string;
  disabled: boolean;
  /** When the principal was last disabled (wall ms of the database's clock), or undefined. */
  disabledAtMs: number | undefined;
  bandwidthWeight: number;
  groupCeilings: readonly GroupCeilings[];
  scopes: ReadonlySet<Scope>;
}

/** A verified client certificate's principal, or why it has none (logged, answered with a plain 401). */
export type CertificateOutcome = { ok: true; principal: Principal } | { ok: false; reason: string };

export interface AuthenticatorOptions {
  pool: pg.Pool;
  /** Connection URL for the LISTEN client (a connection of its own, outside the pool). */
  databaseUrl: ConnectionUrl;
  clock: Clock;
  log: Logger;
  maxEntries?: number;
  /** Most key ids held in the known-key set (the negative cache); more keys disable it. */
  maxKnownKeys?: number;
  /** Ids missing from the set that may still be looked up at once (a key newer than the set). */
  recheckBurst?: number;
  /** …and per second after that; beyond, a missing id is refused without a query. */
  recheckPerSecond?: number;
  pollIntervalMs?: number;
  freshnessMs?: number;
  lastUsedIntervalMs?: number;
}

/**
 * Both schemes, one challenge per header line (wget and browsers answer the Basic one): RFC 9110 allows several in one line, but Apache HttpClient 4 (Maven's
 * wagon) reads only the first scheme of each line and would never see Basic.
 */
export const WWW_AUTHENTICATE = ['Bearer realm="arkvory"', 'Basic realm="arkvory"'];
const UNAUTHORIZED_HEADERS = { 'www-authenticate': WWW_AUTHENTICATE };

export function unauthorized(): PolicyError {
  return new PolicyError('unauthorized', undefined, { headers: UNAUTHORIZED_HEADERS });
}

/** The 401s `staleCredential` made (a mark, not a field: the answer is the same 401 as any other). */
const STALE = new WeakSet<object>();

/**
 * The same 401 as `unauthorized`, for a credential that was genuine and is no longer: a key presented
 * with its right secret but revoked, expired or its principal disabled; a link whose signature holds
 * but that expired, outlives the maximum or whose key no longer works (and an expired link whose
 * signature cannot be checked while the database is out of reach: never served, so never a guess).
 * Its sender holds what was issued, so nothing is being guessed, and the `auth_failure` ban does not count it: a CI job still
 * configured with a revoked key, or a cache refetching an expired link, would otherwise get its
 * address banned and every other client behind it (a NAT, a proxy) locked out (rate-limit-gate.ts).
 */
export function staleCredential(): PolicyError {
  const err = unauthorized();
  STALE.add(err);
  return err;
}

/** Whether `err` is a 401 of a credential that was once genuine (`staleCredential`). */
export function isStaleCredential(err: unknown): boolean {
  return typeof err === 'object' && err !== null && STALE.has(err);
}

/** Equal strings, in a time that depends on their length only (secrets have one fixed length). */
function sameSecret(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Entries counted, not weighed: the auth caches are bounded by count alone. */
class BoundedCache<V> extends BoundedLru<string, V> {
  constructor(maxEntries: number) {
    super({ maxEntries, maxBytes: Number.POSITIVE_INFINITY });
  }
  override set(key: string, value: V): boolean {
    return super.set(key, value, 0);
  }
}

export class Authenticator {
  readonly #pool: pg.Pool;
  readonly #options: AuthenticatorOptions;
  readonly #keys: BoundedCache<KeyEntry | null>;
  readonly #grants: BoundedCache<Map<string, GrantEntry>>;
  /** Ceilings of the repositories the cached grants name, read with them (same epoch). */
  readonly #repositoryCeilings: BoundedCache<RepositoryCeilings>;
  /** Certificate bindings by the certificate's SAN list (joined): an entry, `ambiguous`, or null (unbound). */
  readonly #certs: BoundedCache<CertificateEntry | 'ambiguous' | null>;
  readonly #lastUsedWritten = new BoundedCache<number>(10_000);
  readonly #watcher: EpochWatcher;
  /** Every key id as of the watched epoch; `too_many` past maxKnownKeys; undefined until loaded. */
  #knownKeyIds: Set<string> | 'too_many' | undefined;
  /** Token bucket of set misses that may still be looked up (see the header). */
  #recheckTokens = Number.NaN;
  #recheckAtMs = 0;

  constructor(options: AuthenticatorOptions) {
    this.#options = options;
    this.#pool = options.pool;
    this.#keys = new BoundedCache(options.maxEntries ?? 10_000);
    this.#grants = new BoundedCache(options.maxEntries ?? 10_000);
    this.#repositoryCeilings = new BoundedCache(options.maxEntries ?? 10_000);
    this.#certs = new BoundedCache(options.maxEntries ?? 10_000);
    this.#watcher = new EpochWatcher({
      name: 'auth',
      pool: options.pool,
      databaseUrl: options.databaseUrl,
      table: 'arkvory_auth_epoch',
      channel: 'arkvory_auth',
      clock: options.clock,
      log: options.log,
      ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
      ...(options.freshnessMs === undefined ? {} : { freshnessMs: options.freshnessMs }),
      // Read after the epoch: the set holds at least every key of that epoch, and a later insert
      // moves the epoch, so the set is never trusted without a key it should hold.
      afterPoll: async () => {
        if (this.#knownKeyIds === undefined) await this.#loadKnownKeyIds();
      },
    });
    this.#watcher.onInvalidate(() => {
      this.#keys.clear();
      this.#grants.clear();
      this.#repositoryCeilings.clear();
      this.#certs.clear();
      this.#knownKeyIds = undefined;
    });
  }

  start(): Promise<void> {
    return this.#watcher.start();
  }

  stop(): Promise<void> {
    return this.#watcher.stop();
  }

  /** Whether cached entries may be used now (a recent successful epoch poll). */
  get isCacheTrusted(): boolean {
    return this.#watcher.trusted;
  }

  get #generation(): number {
    return this.#watcher.generation;
  }

  /** Moves whenever the cache is cleared; other caches of auth state (presign secrets) follow it. */
  get cacheGeneration(): number {
    return this.#generation;
  }

  /** How many key ids the negative cache holds, or undefined when it is not in use. */
  get knownKeyCount(): number | undefined {
    const known = this.#knownKeyIds;
    return known === undefined || known === 'too_many' ? undefined : known.size;
  }

  /**
   * One lookup of something the caches say does not exist (a key id outside the known set, a
   * pre-signed link's secret id above the newest known one), if the shared allowance permits it now.
   */
  allowRecheck(): boolean {
    return this.#takeRecheck();
  }

  /** One recheck of an id the set does not hold, if the bucket allows it now. */
  #takeRecheck(): boolean {
    const burst = this.#options.recheckBurst ?? 10;
    const rate = this.#options.recheckPerSecond ?? 5;
    const now = this.#options.clock.monotonicMs();
    // A clock that went back (an injected one) credits nothing rather than taking tokens away.
    const elapsedMs = Math.max(0, now - this.#recheckAtMs);
    const tokens = Number.isNaN(this.#recheckTokens)
      ? burst
      : Math.min(burst, this.#recheckTokens + (elapsedMs / 1000) * rate);
    this.#recheckAtMs = now;
    if (tokens < 1) {
      this.#recheckTokens = tokens;
      return false;
    }
    this.#recheckTokens = tokens - 1;
    return true;
  }

  async #loadKnownKeyIds(): Promise<void> {
    const max = this.#options.maxKnownKeys ?? 100_000;
    const r = await this.#pool.query<{ key_id: string }>('SELECT key_id FROM arkvory_api_keys LIMIT $1', [max + 1]);
    this.#knownKeyIds = r.rows.length > max ? 'too_many' : new Set(r.rows.map((row) => row.key_id));
  }

  /** The key's entry: from the cache at once when it is trusted and holds it, else from the database. */
  #loadKey(keyId: string): MaybePromise<KeyEntry | null> {
    const trusted = this.isCacheTrusted;
    const known = trusted ? this.#knownKeyIds : undefined;
    if (trusted) {
      const cached = this.#keys.get(keyId);
      if (cached !== undefined) return cached;
      if (known !== undefined && known !== 'too_many' && !known.has(keyId) && !this.#takeRecheck()) return null;
    }
    return this.#queryKey(keyId, trusted, known);
  }

  async #queryKey(
    keyId: string,
    trusted: boolean,
    known: Set<string> | 'too_many' | undefined,
  ): Promise<KeyEntry | null> {
    const generation = this.#generation;
    let rows: Array<Record<string, unknown>>;
    try {
      const r = await this.#pool.query(
        `SELECT k.secret_sha256, k.scopes, k.expires_at, k.revoked_at IS NOT NULL AS revoked, p.id AS principal_id, p.name, p.disabled, p.disabled_at, p.bandwidth_weight,
         (SELECT coalesce(json_agg(json_build_object('name', g.name, 'downloadBytesPerSec', g.download_bytes_per_second, 'uploadBytesPerSec', g.upload_bytes_per_second) ORDER BY g.name), '[]'::json)
           FROM arkvory_principal_group_members m JOIN arkvory_principal_groups g ON g.name = m.group_name
           WHERE m.principal_id = p.id AND (g.download_bytes_per_second > 0 OR g.upload_bytes_per_second > 0)) AS group_ceilings
         FROM arkvory_api_keys k JOIN arkvory_principals p ON p.id = k.principal_id WHERE k.key_id = $1`,
        [keyId],
      );
      rows = r.rows;
    } catch (err) {
      throw new PolicyError('unavailable', 'Cannot verify the key right now; retry later.', lookupFailure(err));
    }
    const row = rows[0];
    const entry: KeyEntry | null = row
      ? {
          principalId: row.principal_id as string,
          principalName: row.name as string,
          disabled: row.disabled as boolean,
          disabledAtMs: row.disabled_at ? (row.disabled_at as Date).getTime() : undefined,
          bandwidthWeight: row.bandwidth_weight as number,
          groupCeilings: row.group_ceilings as GroupCeilings[],
          secretSha256: row.secret_sha256 as Buffer,
          scopes: new Set(row.scopes as Scope[]),
          expiresAtMs: row.expires_at ? (row.expires_at as Date).getTime() : null,
          revoked: row.revoked as boolean,
        }
      : null;
    // Not when the cache was cleared meanwhile: the row may predate the change that cleared it.
    if (trusted && generation === this.#generation) this.#keys.set(keyId, entry);
    // A key newer than the set (its NOTIFY still on the way): known from now on.
    if (entry && known instanceof Set && known === this.#knownKeyIds) known.add(keyId);
    return entry;
  }

  /** The principal for an Authorization header; every failure is the same 401. */
  async authenticate(header: unknown): Promise<Principal> {
    return this.authenticateNow(header);
  }

  /** `authenticate`, answering at once from the trusted cache (a failure then throws here). */
  authenticateNow(header: unknown): MaybePromise<Principal> {
    const parsed = parseAuthorization(header);
    if (!parsed) throw unauthorized();
    const entry = this.#loadKey(parsed.keyId);
    return isPromise(entry) ? entry.then((e) => this.#principalOf(parsed, e)) : this.#principalOf(parsed, entry);
  }

  #principalOf(parsed: { keyId: string; secret: string }, entry: KeyEntry | null): Principal {
    if (!entry) throw unauthorized();
    const seen = entry.verifiedSecret !== undefined && sameSecret(parsed.secret, entry.verifiedSecret);
    if (!seen) {
      if (!secretMatches(parsed.secret, entry.secretSha256)) throw unauthorized();
      entry.verifiedSecret = parsed.secret;
    }
    // The secret matched: whatever refuses it now, the key was not guessed.
    if (entry.revoked || entry.disabled) throw staleCredential();
    if (entry.expiresAtMs !== null && entry.expiresAtMs <= this.#options.clock.wallMs()) throw staleCredential();
    this.#touch(parsed.keyId);
    return {
      id: entry.principalId,
      name: entry.principalName,
      keyId: parsed.keyId,
      scopes: entry.scopes,
      disabledAtMs: entry.disabledAtMs,
      bandwidthWeight: entry.bandwidthWeight,
      groupCeilings: entry.groupCeilings,
    };
  }

  /**
   * The principal of a key id that is still valid (not revoked or expired, principal enabled), with
   * no secret: a pre-signed link names the key that made it and is checked against it on every use.
   * Called only once the link's signature holds, so a refusal is a stale credential's.
   */
  async authenticateKeyId(keyId: string): Promise<Principal> {
    const entry = await this.#loadKey(keyId);
    if (!entry || entry.revoked || entry.disabled) throw staleCredential();
    if (entry.expiresAtMs !== null && entry.expiresAtMs <= this.#options.clock.wallMs()) throw staleCredential();
    return {
      id: entry.principalId,
      name: entry.principalName,
      keyId,
      scopes: entry.scopes,
      disabledAtMs: entry.disabledAtMs,
      bandwidthWeight: entry.bandwidthWeight,
      groupCeilings: entry.groupCeilings,
    };
  }

  /**
   * The scopes a key still acts with for a transfer that is already running, or undefined once it
   * does not: the key gone or revoked, its principal disabled, or disabled since the transfer began
   * and enabled again (`disabledAtMs`, as the transfer's authentication read it: the database's
   * `disabled_at`, so no gateway clock is compared). Expiry is not checked: a key's expiry was known
   * when the transfer began, a revocation was not. From the trusted cache at once, like `authenticateNow`.
   */
  keyStandingNow(keyId: string, disabledAtMs: number | undefined): MaybePromise<ReadonlySet<Scope> | undefined> {
    const standing = (entry: KeyEntry | null) =>
      !entry || entry.revoked || entry.disabled || entry.disabledAtMs !== disabledAtMs ? undefined : entry.scopes;
    const entry = this.#loadKey(keyId);
    return isPromise(entry) ? entry.then(standing) : standing(entry);
  }

  /**
   * Runs `listener` whenever the caches are cleared: a change that may revoke access was made (or
   * may have been made while notifications were lost). Transfers already running are asked again then.
   */
  onChange(listener: () => void): void {
    this.#watcher.onInvalidate(listener);
  }

  /**
   * The principal a verified client certificate is bound to (by one of its SANs, exactly), checked
   * on every request like a key: the cache is the key cache's (same epoch, same 2 s bound), so an
   * unbinding or a disabled principal reaches connections that are already open.
   */
  certificatePrincipalNow(sans: readonly string[]): MaybePromise<CertificateOutcome> {
    if (sans.length === 0)
      return { ok: false, reason: 'the client certificate has no URI or DNS subject alternative name' };
    const cacheKey = sans.join('\n');
    const trusted = this.isCacheTrusted;
    const cached = trusted ? this.#certs.get(cacheKey) : undefined;
    if (cached !== undefined) return certificateOutcome(sans, cached);
    return this.#queryCertificate(sans, cacheKey, trusted).then((entry) => certificateOutcome(sans, entry));
  }

  async #queryCertificate(
    sans: readonly string[],
    cacheKey: string,
    trusted: boolean,
  ): Promise<CertificateEntry | 'ambiguous' | null> {
    const generation = this.#generation;
    let rows: Array<Record<string, unknown>>;
    try {
      const r = await this.#pool.query(
        `SELECT b.san, b.scopes, p.id AS principal_id, p.name, p.disabled, p.disabled_at, p.bandwidth_weight,
         (SELECT coalesce(json_agg(json_build_object('name', g.name, 'downloadBytesPerSec', g.download_bytes_per_second, 'uploadBytesPerSec', g.upload_bytes_per_second) ORDER BY g.name), '[]'::json)
           FROM arkvory_principal_group_members m JOIN arkvory_principal_groups g ON g.name = m.group_name
           WHERE m.principal_id = p.id AND (g.download_bytes_per_second > 0 OR g.upload_bytes_per_second > 0)) AS group_ceilings
         FROM arkvory_certificate_bindings b JOIN arkvory_principals p ON p.id = b.principal_id WHERE b.san = ANY($1::text[])
         ORDER BY b.san COLLATE "C"`,
        [sans],
      );
      rows = r.rows;
    } catch (err) {
      throw new PolicyError(
        'unavailable',
        'Cannot verify the client certificate right now; retry later.',
        lookupFailure(err),
      );
    }
    const principals = new Set(rows.map((row) => row.principal_id as string));
    // Several names of one certificate bound to one principal: the key id (logs, rate-limit
    // identifiers) is the first bound name in byte order (ORDER BY above), never whichever row the
    // scan met first, which moves when a binding is updated or the table rewritten.
    const row = rows[0];
    const entry: CertificateEntry | 'ambiguous' | null =
      principals.size > 1
        ? 'ambiguous'
        : row
          ? {
              san: row.san as string,
              principalId: row.principal_id as string,
              principalName: row.name as string,
              disabled: row.disabled as boolean,
              disabledAtMs: row.disabled_at ? (row.disabled_at as Date).getTime() : undefined,
              bandwidthWeight: row.bandwidth_weight as number,
              groupCeilings: row.group_ceilings as GroupCeilings[],
              // One principal, possibly several bound SANs: the union of their scopes.
              scopes: new Set(rows.flatMap((r) => r.scopes as Scope[])),
            }
          : null;
    if (trusted && generation === this.#generation) this.#certs.set(cacheKey, entry);
    return entry;
  }

  /** The principal's permission on a repository, or undefined when it has none (or no such repository). */
  async grant(principalId: string, repository: string): Promise<Permission | undefined> {
    return this.grantNow(principalId, repository);
  }

  /** `grant`, answering at once from the trusted cache. */
  grantNow(principalId: string, repository: string): MaybePromise<Permission | undefined> {
    const entry = this.#grantEntryNow(principalId, repository);
    return isPromise(entry) ? entry.then((e) => e?.permission) : entry?.permission;
  }

  /**
   * The grant a pre-signed link made at `issuedAtS` (unix seconds, the database's clock) acts with:
   * none when the principal's grant on the repository was removed since (`linkPredates`), even
   * if it has been given again. Answers at once from the trusted cache, like `grantNow`.
   */
  grantForLinkNow(principalId: string, repository: string, issuedAtS: number): MaybePromise<Permission | undefined> {
    const forLink = (e: GrantEntry | undefined) =>
      e === undefined || linkPredates(issuedAtS, e.removedAtMs) ? undefined : e.permission;
    const entry = this.#grantEntryNow(principalId, repository);
    return isPromise(entry) ? entry.then(forLink) : forLink(entry);
  }

  #grantEntryNow(principalId: string, repository: string): MaybePromise<GrantEntry | undefined> {
    const trusted = this.isCacheTrusted;
    const grants = trusted ? this.#grants.get(principalId) : undefined;
    if (grants) return grants.get(repository);
    return this.#queryGrants(principalId, trusted).then((g) => g.get(repository));
  }

  async #queryGrants(principalId: string, trusted: boolean): Promise<Map<string, GrantEntry>> {
    const generation = this.#generation;
    let grants: Map<string, GrantEntry>;
    try {
      // The removal is read with the grant (one snapshot, one epoch): it is written by the trigger of
      // the statement that removed the grant, which moves the epoch as any grant change does.
      const r = await this.#pool.query<{
        repository: string;
        permission: Permission;
        removed_at: Date | null;
        download: string;
        upload: string;
        max_transfers: number;
      }>(
        `SELECT g.repository, g.permission, x.removed_at, r.download_bytes_per_second::text AS download,
                r.upload_bytes_per_second::text AS upload, r.max_transfers
         FROM arkvory_grants g JOIN arkvory_repositories r ON r.name = g.repository
         LEFT JOIN arkvory_grant_removals x ON x.principal_id = g.principal_id AND x.repository = g.repository
         WHERE g.principal_id = $1`,
        [principalId],
      );
      grants = new Map(
        r.rows.map((row) => [
          row.repository,
          { permission: row.permission, removedAtMs: row.removed_at ? row.removed_at.getTime() : undefined },
        ]),
      );
      // Kept even when the cache is not trusted: a ceiling a few seconds old beats none.
      if (generation === this.#generation)
        for (const row of r.rows)
          this.#repositoryCeilings.set(row.repository, {
            downloadBytesPerSec: Number(row.download),
            uploadBytesPerSec: Number(row.upload),
            maxTransfers: row.max_transfers,
          });
    } catch (err) {
      throw new PolicyError('unavailable', 'Cannot check permissions right now; retry later.', lookupFailure(err));
    }
    if (trusted && generation === this.#generation) this.#grants.set(principalId, grants);
    return grants;
  }

  /**
   * The ceilings of a repository, as read with the grants of a principal that named it (every
   * transfer's grant check loads them first); undefined when not read since the last auth change.
   */
  repositoryCeilingsNow(repository: string): RepositoryCeilings | undefined {
    return this.#repositoryCeilings.get(repository);
  }

  /** Every repository the principal may read, for listings: cached grants only while the cache is trusted, as for a grant check. */
  async readableRepositories(principalId: string): Promise<string[]> {
    const trusted = this.isCacheTrusted;
    const grants =
      (trusted ? this.#grants.get(principalId) : undefined) ?? (await this.#queryGrants(principalId, trusted));
    return [...grants.keys()].sort();
  }

  /** last_used_at, written at most once a minute per key so a busy client does not write per request. */
  #touch(keyId: string): void {
    const now = this.#options.clock.monotonicMs();
    const last = this.#lastUsedWritten.get(keyId);
    if (last !== undefined && now - last < (this.#options.lastUsedIntervalMs ?? 60_000)) return;
    this.#lastUsedWritten.set(keyId, now);
    this.#pool
      .query('UPDATE arkvory_api_keys SET last_used_at = now() WHERE key_id = $1', [keyId])
      .catch((err: unknown) => {
        this.#options.log.debug({ err: { message: (err as Error).message } }, 'last_used_at update failed');
      });
  }
}

function certificateOutcome(sans: readonly string[], entry: CertificateEntry | 'ambiguous' | null): CertificateOutcome {
  if (entry === null) return { ok: false, reason: `no principal is bound to ${sans.join(', ')}` };
  if (entry === 'ambiguous')
    return { ok: false, reason: `the certificate's names ${sans.join(', ')} are bound to different principals` };
  if (entry.disabled) return { ok: false, reason: `principal ${entry.principalName} is disabled` };
  return {
    ok: true,
    principal: {
      id: entry.principalId,
      name: entry.principalName,
      keyId: `cert:${entry.san}`,
      scopes: entry.scopes,
      disabledAtMs: entry.disabledAtMs,
      bandwidthWeight: entry.bandwidthWeight,
      groupCeilings: entry.groupCeilings,
    },
  };
}
