/**
 * Pre-signed links: issuing them for a principal's key and verifying them on use. The signing
 * secrets live in PostgreSQL (`arkvory_presign_secrets`) and are cached like keys: dropped whenever
 * the Authenticator's cache is (NOTIFY or a moved epoch), trusted only while it trusts its own, so
 * a rotation, a revoked key, a removed grant or a disabled principal kills a link within 2 s. A
 * link made before its principal was last disabled, or before its grant on the repository was last
 * removed, stays dead once the principal is enabled (or granted) again.
 *
 * Unknown secret ids cost no query: ids are issued in ascending order, so an id at or below the
 * newest cached one that the cache lacks never existed and is refused at once (retired secrets are
 * cached too, to tell a rotated-out link, refused as stale, from a forged one). Only
 * an id above it (a secret rotated in elsewhere, its NOTIFY not here yet) is read again, behind the
 * Authenticator's recheck allowance for unknown keys.
 *
 * A verified link also names the sha256 of the content it was made for; the content route compares
 * it with what the name holds when it serves (`link_content_changed` otherwise).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { Clock } from '../clock.ts';
import { PolicyError } from '../errors.ts';
import { staleCredential, unauthorized, type Authenticator } from './authenticator.ts';
import type { Principal } from './principal.ts';
import {
  canonicalPath,
  isOutdatedLink,
  linkPredates,
  msUntilLinkOutlivesRemoval,
  outlivesMaxLifetime,
  parsePresignQuery,
  presignQueryString,
  signatureMatches,
  signPresign,
  type PresignFields,
} from './presign-signature.ts';
import { withTransaction } from '../../lib/transaction.ts';
import { lookupFailure } from '../../lib/statement-deadline.ts';

interface SecretRow {
  readonly id: string;
  readonly secret: Buffer;
  readonly retiresAtMs: number | null;
  /** Retired by the database's clock when read (which also set `retiresAtMs`). */
  readonly retired: boolean;
}

export interface IssuedLink {
  /** Canonical path plus query: append to the gateway's (or router's) origin. */
  readonly pathAndQuery: string;
  readonly expiresAt: Date;
}

/**
 * Every secret, retired ones too: a retired secret signs nothing and verifies nothing, but a link it
 * signed is then told from a forged one (a stale link's 401 does not count toward a ban).
 */
async function loadSecrets(pool: pg.Pool | pg.PoolClient): Promise<SecretRow[]> {
  const r = await pool.query<{ id: string; secret: Buffer; retires_at: Date | null; retired: boolean }>(
    'SELECT id::text AS id, secret, retires_at, coalesce(retires_at <= now(), false) AS retired FROM arkvory_presign_secrets ORDER BY id',
  );
  return r.rows.map((row) => ({
    id: row.id,
    secret: row.secret,
    retiresAtMs: row.retires_at ? row.retires_at.getTime() : null,
    retired: row.retired,
  }));
}

/** "arkvory-presign": a transaction lock of its own key, not a table lock (which needs UPDATE on the whole table). */
const PRESIGN_LOCK_KEY = 0x61726b76_7073n;

/** The lock serialises the first secret's creation and rotations (writer and CLI may race); every insert takes it. */
function lockedSecrets<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return withTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock($1)', [PRESIGN_LOCK_KEY.toString()]);
    return work(client);
  });
}

/**
 * Puts a new signing secret in place. The old ones retire after `graceSeconds` (0: at once, their
 * links die within 2 s); returns the new secret's id and when the old ones stop verifying.
 */
export async function rotatePresignSecret(
  pool: pg.Pool,
  graceSeconds: number,
): Promise<{ secretId: string; oldLinksValidUntil: string }> {
  return lockedSecrets(pool, async (client) => {
    const retired = await client.query<{ until: Date }>(
      `UPDATE arkvory_presign_secrets SET retires_at = now() + make_interval(secs => $1) WHERE retires_at IS NULL OR retires_at > now() + make_interval(secs => $1) RETURNING now() + make_interval(secs => $1) AS until`,
      [graceSeconds],
    );
    const inserted = await client.query<{ id: string; now: Date }>(
      'INSERT INTO arkvory_presign_secrets (secret) VALUES ($1) RETURNING id::text AS id, now() AS now',
      [randomBytes(32)],
    );
    const until = retired.rows[0]?.until ?? inserted.rows[0]!.now;
    return { secretId: inserted.rows[0]!.id, oldLinksValidUntil: until.toISOString() };
  });
}

export class PresignedLinks {
  readonly #pool: pg.Pool;
  readonly #auth: Authenticator;
  readonly #clock: Clock;
  readonly #maxLifetimeSeconds: number;
  #cache: { generation: number; rows: SecretRow[] } | undefined;

  /** `maxLifetimeSeconds`: ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS now, checked again on every use. */
  constructor(options: { pool: pg.Pool; auth: Authenticator; clock: Clock; maxLifetimeSeconds: number }) {
    this.#pool = options.pool;
    this.#auth = options.auth;
    this.#clock = options.clock;
    this.#maxLifetimeSeconds = options.maxLifetimeSeconds;
  }

  async #secrets(options: { fresh?: boolean } = {}): Promise<SecretRow[]> {
    const generation = this.#auth.cacheGeneration;
    const trusted = this.#auth.isCacheTrusted;
    if (!options.fresh && trusted && this.#cache?.generation === generation) return this.#cache.rows;
    let rows: SecretRow[];
    try {
      rows = await loadSecrets(this.#pool);
    } catch (err) {
      throw new PolicyError('unavailable', 'Cannot verify the link right now; retry later.', lookupFailure(err));
    }
    this.#cache = trusted ? { generation, rows } : undefined;
    return rows;
  }

  /**
   * The newest unretired secret; the first one is created on first use. Read fresh (issuing is rare):
   * a link made just after a rotation elsewhere must not be signed by the secret it retired.
   */
  async #signingSecret(): Promise<SecretRow> {
    const current = (await this.#secrets({ fresh: true })).filter((s) => s.retiresAtMs === null).at(-1);
    if (current) return current;
    const created = await lockedSecrets(this.#pool, async (client) => {
      const existing = (await loadSecrets(client)).filter((s) => s.retiresAtMs === null).at(-1);
      if (existing) return existing;
      const secret = randomBytes(32);
      const r = await client.query<{ id: string }>(
        'INSERT INTO arkvory_presign_secrets (secret) VALUES ($1) RETURNING id::text AS id',
        [secret],
      );
      return { id: r.rows[0]!.id, secret, retiresAtMs: null, retired: false };
    });
    // The cached list predates the new secret; the NOTIFY that clears it may still be on its way.
    this.#cache = undefined;
    return created;
  }

  /**
   * A link to `pathname` (a content path) made by the principal's key, valid `lifetimeSeconds`, for
   * the content whose sha256 is `sha256` (what the name holds now).
   */
  async issue(
    principal: Principal,
    pathname: string,
    sha256: string,
    lifetimeSeconds: number,
    repository: string,
  ): Promise<IssuedLink> {
    const path = canonicalPath(pathname);
    if (path === undefined) throw new PolicyError('invalid_request', 'The target path is not valid.');
    // A link names the key it is checked against on every use; a client certificate is no key.
    if (principal.keyId.startsWith('cert:'))
      throw new PolicyError('forbidden', 'Pre-signed links are made with an API key, not a client certificate.');
    const signing = await this.#signingSecret();
    // The database's clock, which also stamps `disabled_at` and grant removals: a link dated by a
    // gateway clock running ahead would count as made after a disable (or a grant's removal) that
    // came just after it, and revive on enable (or a new grant).
    const nowS = Math.floor((await this.#linkDateMs(principal.id, repository)) / 1000);
    const fields: PresignFields = {
      path,
      keyId: principal.keyId,
      issuedAt: nowS,
      expiresAt: nowS + lifetimeSeconds,
      secretId: signing.id,
      sha256,
    };
    return {
      pathAndQuery: `${path}?${presignQueryString(fields, signPresign(signing.secret, fields))}`,
      expiresAt: new Date(fields.expiresAt * 1000),
    };
  }

  /**
   * Now by the database's clock, in a later second than the last removal of the principal's grant
   * on the repository and than its last disable: a link dated within either second would count as
   * made before it and be void from birth (`linkPredates`, the `disabled_at` check in
   * `authenticate`). So a link asked for within the second of a removal and a new grant, or of a
   * disable and an enable (a script that gives back at once), waits for the next second, once.
   * `disabled_at` is read here, not from the principal's cached copy, which may predate the disable.
   */
  async #linkDateMs(principalId: string, repository: string): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      let row: { now: Date; removed_at: Date | null; disabled_at: Date | null };
      try {
        row = (
          await this.#pool.query<{ now: Date; removed_at: Date | null; disabled_at: Date | null }>(
            `SELECT now() AS now, (SELECT removed_at FROM arkvory_grant_removals
               WHERE principal_id = $1 AND repository = $2) AS removed_at,
             (SELECT disabled_at FROM arkvory_principals WHERE id = $1) AS disabled_at`,
            [principalId, repository],
          )
        ).rows[0]!;
      } catch (err) {
        throw new PolicyError('unavailable', 'Cannot make the link right now; retry later.', lookupFailure(err));
      }
      const nowMs = row.now.getTime();
      const waitMs = Math.max(
        msUntilLinkOutlivesRemoval(nowMs, row.removed_at?.getTime()),
        msUntilLinkOutlivesRemoval(nowMs, row.disabled_at?.getTime()),
      );
      if (waitMs === 0) return nowMs;
      // Only a stamp made by a clock that has since gone back leaves more than a second to wait.
      if (attempt > 0 || waitMs > 1000)
        throw new PolicyError('unavailable', 'Cannot make the link right now; retry in a second.');
      // Elapsed time, which the database's clock and this one agree on; no injected clock dates a link.
      await sleep(waitMs);
    }
  }

  /** The secret a link names: from the cache, or read again only when it may be newer than the cache. */
  async #secretFor(secretId: string): Promise<SecretRow | undefined> {
    const cached = await this.#secrets();
    const found = cached.find((s) => s.id === secretId);
    if (found) return found;
    const newest = cached.at(-1);
    // Ids are ascending (`ORDER BY id`) and retired ones are cached too: one at or below the newest is unknown.
    if (newest !== undefined && BigInt(secretId) <= BigInt(newest.id)) return undefined;
    if (this.#auth.isCacheTrusted && !this.#auth.allowRecheck()) return undefined;
    return (await this.#secrets({ fresh: true })).find((s) => s.id === secretId);
  }

  /**
   * The principal a link acts for and the sha256 of the content it was made for; a bad, expired,
   * rotated-out or revoked link, or one that outlives the current maximum lifetime, is the same 401
   * as a bad key, a link of the first format 410
   * `link_outdated`, one made before its principal was last disabled 401. `issuedAtS` is when the
   * link was made: the caller checks the grant it acts with by it (`Authenticator.grantForLinkNow`),
   * so one made before its grant was last removed finds none (404) once the grant is given again.
   */
  async authenticate(
    pathname: string,
    query: URLSearchParams,
  ): Promise<{ principal: Principal; sha256: string; issuedAtS: number }> {
    const link = parsePresignQuery(query);
    const path = canonicalPath(pathname);
    if (!link && isOutdatedLink(query)) throw new PolicyError('link_outdated');
    if (!link || path === undefined) throw unauthorized();
    const nowMs = this.#clock.wallMs();
    const expired = link.expiresAt * 1000 <= nowMs;
    // An expired link is refused whatever the database says; its secret is read only to tell a
    // stale link from a forged one, so a database out of reach makes it a 401, not a 503. Not one
    // that counts toward the address's ban: no expired link is ever served, so nothing is guessed
    // with one, and a download manager behind a NAT refetching an expired link through an outage
    // would otherwise get every client behind that address banned, well past the outage.
    const secret = await this.#secretFor(link.secretId).catch((err: unknown) => {
      if (expired) throw staleCredential();
      throw err;
    });
    if (!secret) throw unauthorized();
    const { signature, ...signed } = link;
    if (!signatureMatches(secret.secret, { path, ...signed }, signature)) throw unauthorized();
    // The signature holds: this gateway made the link, so a refusal from here on is of a stale one
    // (not counted toward the address's ban), the same 401 to the client.
    if (expired) throw staleCredential();
    if (secret.retired || (secret.retiresAtMs !== null && secret.retiresAtMs <= nowMs)) throw staleCredential();
    // A maximum lowered since the link was made (after a leak, say) applies to it too.
    if (outlivesMaxLifetime(link, nowMs, this.#maxLifetimeSeconds)) throw staleCredential();
    const principal = await this.#auth.authenticateKeyId(link.keyId);
    // Re-enabling a principal restores its keys, not the links made before it was disabled.
    if (linkPredates(link.issuedAt, principal.disabledAtMs)) throw staleCredential();
    return { principal, sha256: link.sha256, issuedAtS: link.issuedAt };
  }
}
