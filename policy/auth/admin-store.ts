/**
 * Administration of principals, keys, repositories and grants: the one implementation behind both
 * the CLI and the `/api/v1/admin/` routes. Secrets are generated here and returned once.
 */
import type pg from 'pg';
import { PolicyError } from '../errors.ts';
import { quoted } from '../../lib/quoted.ts';
import { generateKey, holdsKey } from './key-format.ts';
import { SCOPES, type Scope } from './principal.ts';
import type { Permission } from './authorize.ts';
import { normalizeSan } from './client-certificate.ts';
import {
  CURSORS,
  decodeCursor,
  PAGE_DEFAULT_LIMIT,
  PAGE_MAX_LIMIT,
  type Page,
  type PageRequest,
  pageLimit,
  pageOf,
} from './page.ts';

export interface PrincipalRow {
  id: string;
  name: string;
  disabled: boolean;
  /** Share of a contended bandwidth ceiling relative to the others (1..1000, default 1). */
  bandwidthWeight: number;
  createdAt: string;
}

export interface GroupRow {
  name: string;
  downloadBytesPerSec: number;
  uploadBytesPerSec: number;
  /** The first `GROUP_MEMBERS_SHOWN` principal names, sorted. */
  members: string[];
  /**
   * Where the group's members listing (`listGroupMembers`) continues past `members`; null when they
   * are all. A group of thousands of principals made every answer naming the group unbounded.
   */
  membersNextCursor: string | null;
}

/** The members a group's answer holds (one default page): the rest are read page by page. */
export const GROUP_MEMBERS_SHOWN = PAGE_DEFAULT_LIMIT;

export interface RepositoryCeilingsRow {
  name: string;
  downloadBytesPerSec: number;
  uploadBytesPerSec: number;
  maxTransfers: number;
}

/** A group or repository ceiling: 0 (none) or 65536 B/s .. 1 TiB/s (migration 0062). */
export const MIN_CEILING_BYTES_PER_SECOND = 65_536;
export const MAX_CEILING_BYTES_PER_SECOND = 2 ** 40;

function ceilingRate(value: number | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (
    !Number.isSafeInteger(value) ||
    (value !== 0 && (value < MIN_CEILING_BYTES_PER_SECOND || value > MAX_CEILING_BYTES_PER_SECOND))
  )
    throw new PolicyError(
      'invalid_request',
      `${name} must be 0 (no ceiling) or an integer from ${MIN_CEILING_BYTES_PER_SECOND} to ${MAX_CEILING_BYTES_PER_SECOND}, got ${value}`,
    );
  return value;
}

function repositoryCeilingsRow(row: Record<string, unknown>): RepositoryCeilingsRow {
  return {
    name: row.name as string,
    downloadBytesPerSec: Number(row.down),
    uploadBytesPerSec: Number(row.up),
    maxTransfers: row.max_transfers as number,
  };
}

/** The largest bound on a repository's concurrent transfers per gateway (0 = none). */
export const MAX_REPOSITORY_TRANSFERS = 100_000;

/** Bounds of `arkvory_principals.bandwidth_weight` (migration 0060). */
export const MAX_BANDWIDTH_WEIGHT = 1000;

export interface KeyRow {
  keyId: string;
  principalId: string;
  kind: 'service' | 'personal';
  scopes: Scope[];
  description: string | null;
  createdAt: string;
  expiresAt: string | null;
  revokedAt: string | null;
  lastUsedAt: string | null;
}

export interface CreatedKey extends KeyRow {
  /** The whole key: shown once, never stored. */
  key: string;
}

/** A client-certificate binding (mutual TLS): the SAN that authenticates the principal. */
export interface CertificateBindingRow {
  san: string;
  principalId: string;
  principalName: string;
  scopes: Scope[];
  createdAt: string;
}

export interface GrantRow {
  principalId: string;
  principalName: string;
  repository: string;
  permission: Permission;
}

/** A principal as the console's access view shows it (`accessView`). */
export interface AccessPrincipal extends PrincipalRow {
  /** Its first `ACCESS_KEYS_SHOWN` keys, oldest first (as `listKeys`). */
  keys: KeyRow[];
  /** Where `listKeys` (GET …/principals/{principal}/keys) continues past `keys`; null when they are all. */
  keysNextCursor: string | null;
  /** Its first `ACCESS_GRANTS_SHOWN` grants, by repository. */
  grants: Array<{ repository: string; permission: Permission }>;
  /** Where `listGrants` (GET …/grants?principal=) continues past `grants`; null when they are all. */
  grantsNextCursor: string | null;
}

/** The keys and the grants each principal of the access view holds (one default page of each). */
export const ACCESS_KEYS_SHOWN = PAGE_DEFAULT_LIMIT;
export const ACCESS_GRANTS_SHOWN = PAGE_DEFAULT_LIMIT;
/** The repositories the access view holds (one largest page): the rest, or those by a prefix, are read by `listRepositories`. */
export const ACCESS_REPOSITORIES_SHOWN = PAGE_MAX_LIMIT;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PRINCIPAL_NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/;
const REPOSITORY_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

/** A new principal's name, checked without the database (the CLI checks it before connecting). */
export function checkPrincipalName(name: unknown): string {
  if (typeof name !== 'string' || !PRINCIPAL_NAME.test(name))
    throw new PolicyError('invalid_request', 'principal name must match ^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$');
  // A reference is read as an id first (findPrincipal): a name shaped like one would act on another principal.
  if (UUID.test(name))
    throw new PolicyError('invalid_request', 'a principal name may not have the shape of a principal id');
  return name;
}

/** A new repository's name, checked without the database. */
export function checkRepositoryName(name: unknown): string {
  if (typeof name !== 'string' || !REPOSITORY_NAME.test(name))
    throw new PolicyError('invalid_request', 'repository name must match ^[a-z0-9][a-z0-9._-]{0,63}$');
  return name;
}

/**
 * A repository listing's `prefix` as asked for: undefined (or empty) for none, else the start of a
 * repository name (at most 64 of its characters); anything else is `invalid_request`.
 */
export function checkRepositoryPrefix(prefix: unknown): string | undefined {
  if (prefix === undefined || prefix === null || prefix === '') return undefined;
  if (typeof prefix !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,63}$/.test(prefix))
    throw new PolicyError(
      'invalid_request',
      'prefix must be the start of a repository name: ^[a-z0-9][a-z0-9._-]{0,63}$',
    );
  return prefix;
}

/** A group's name, checked without the database. */
export function checkGroupName(name: unknown): string {
  if (typeof name !== 'string' || !PRINCIPAL_NAME.test(name))
    throw new PolicyError('invalid_request', 'group name must match ^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$');
  return name;
}
const KEY_ID = /^[a-z0-9]{16}$/;

/**
 * 404 for a key id. Only a well-formed id is quoted: what stands where an id belongs may be a whole
 * key (an admin revoking a leaked key by pasting it), and this message is answered and logged.
 */
function noSuchKey(keyId: string): PolicyError {
  return new PolicyError(
    'not_found',
    KEY_ID.test(keyId)
      ? `no key "${keyId}"`
      : 'no key with that key id (16 lowercase letters and digits: the part of a key between ark_ and the second _)',
  );
}
/**
 * 404 for a principal reference. One that holds a key is not quoted: an admin disabling the owner
 * of a leaked key may paste the key where the principal belongs (with a blank, a newline or a
 * character more or less), and this message is answered and logged.
 */
export function noSuchPrincipal(ref: string): PolicyError {
  return new PolicyError(
    'not_found',
    holdsKey(ref)
      ? 'no principal by that reference (a principal is named by its id or its name, not by one of its keys)'
      : `no principal ${quoted(ref)}`,
  );
}

/** A key lives at most ten years: longer ones are no expiry at all, and past ~2^53 s PostgreSQL overflows. */
export const MAX_KEY_LIFETIME_SECONDS = 10 * 365 * 24 * 3600;
/** Longest key description kept. */
export const MAX_KEY_DESCRIPTION_LENGTH = 1024;

/** `expiresInSeconds` as given by an admin (API, console, CLI): undefined, or an integer in range. */
export function checkKeyLifetime(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > MAX_KEY_LIFETIME_SECONDS)
    throw new PolicyError(
      'invalid_request',
      `expiresInSeconds must be an integer from 1 to ${MAX_KEY_LIFETIME_SECONDS} (10 years); omit it for a key that does not expire`,
    );
  return value;
}

function iso(value: Date | null): string | null {
  return value ? value.toISOString() : null;
}

function toKey(r: Record<string, unknown>): KeyRow {
  return {
    keyId: r.key_id as string,
    principalId: r.principal_id as string,
    kind: r.kind as KeyRow['kind'],
    scopes: r.scopes as Scope[],
    description: (r.description as string | null) ?? null,
    createdAt: (r.created_at as Date).toISOString(),
    expiresAt: iso(r.expires_at as Date | null),
    revokedAt: iso(r.revoked_at as Date | null),
    lastUsedAt: iso(r.last_used_at as Date | null),
  };
}

function toPrincipal(r: Record<string, unknown>): PrincipalRow {
  return {
    id: r.id as string,
    name: r.name as string,
    disabled: r.disabled as boolean,
    bandwidthWeight: r.bandwidth_weight as number,
    createdAt: (r.created_at as Date).toISOString(),
  };
}

function toBinding(r: Record<string, unknown>, principalName: string): CertificateBindingRow {
  return {
    san: r.san as string,
    principalId: r.principal_id as string,
    principalName,
    scopes: r.scopes as Scope[],
    createdAt: (r.created_at as Date).toISOString(),
  };
}

export function parseScopes(value: unknown): Scope[] {
  const list = typeof value === 'string' ? value.split(',').map((s) => s.trim()) : value;
  if (!Array.isArray(list) || list.length === 0 || !list.every((s) => (SCOPES as readonly unknown[]).includes(s))) {
    throw new PolicyError('invalid_request', `scopes must be a non-empty list of ${SCOPES.join(', ')}`);
  }
  return [...new Set(list as Scope[])];
}

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23505';
}

export class AdminStore {
  readonly #pool: pg.Pool;
  constructor(pool: pg.Pool) {
    this.#pool = pool;
  }

  async createPrincipal(name: string): Promise<PrincipalRow> {
    checkPrincipalName(name);
    try {
      const r = await this.#pool.query('INSERT INTO arkvory_principals (name) VALUES ($1) RETURNING *', [name]);
      return toPrincipal(r.rows[0]);
    } catch (err) {
      if (isUniqueViolation(err))
        throw new PolicyError('conflict', `principal "${name}" already exists`, { cause: err });
      throw err;
    }
  }

  /** One page of principals, by name. */
  async listPrincipals(page: PageRequest = {}): Promise<Page<PrincipalRow>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.principals);
    const r = await this.#pool.query(
      'SELECT * FROM arkvory_principals WHERE $1::text IS NULL OR name > $1 ORDER BY name LIMIT $2',
      [after?.[0] ?? null, limit + 1],
    );
    return pageOf(r.rows.map(toPrincipal), limit, CURSORS.principals, (p) => [p.name]);
  }

  /**
   * The console's access view: one page of principals, each with its first `ACCESS_KEYS_SHOWN` keys
   * (never a secret) and first `ACCESS_GRANTS_SHOWN` grants, and the first `ACCESS_REPOSITORIES_SHOWN`
   * repositories, in one statement (it used to be one query per principal: 1.0 s at 2,000
   * principals). Each bounded list carries the cursor of the admin listing that continues it
   * (`listKeys`, `listGrants`, `listRepositories`): a principal with thousands of keys or grants made
   * the page unbounded, and repositories past the first 1000 could not be reached at all. The
   * repositories come with the first page only (null past it): a "more principals" read them again,
   * up to 1000, each time, and the console keeps the first page's.
   */
  async accessView(page: PageRequest = {}): Promise<{
    principals: Page<AccessPrincipal>;
    repositories: Page<{ name: string; createdAt: string }> | null;
  }> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.access);
    const r = await this.#pool.query<{
      principals: Array<Record<string, unknown>> | null;
      repositories: Array<Record<string, unknown>> | null;
    }>(
      `WITH page AS (
         SELECT * FROM arkvory_principals WHERE $1::text IS NULL OR name > $1 ORDER BY name LIMIT $2
       )
       SELECT
         (SELECT json_agg(json_build_object(
            'principal', to_jsonb(p),
            'keys', COALESCE((SELECT json_agg(to_jsonb(k) - 'secret_sha256' ORDER BY k.created_at, k.key_id)
                              FROM (SELECT *, (extract(epoch FROM created_at) * 1000000)::bigint::text AS created_us
                                      FROM arkvory_api_keys WHERE principal_id = p.id
                                     ORDER BY created_at, key_id LIMIT $4) k), '[]'::json),
            'grants', COALESCE((SELECT json_agg(json_build_object('repository', g.repository, 'permission', g.permission) ORDER BY g.repository)
                                FROM (SELECT repository, permission FROM arkvory_grants WHERE principal_id = p.id
                                       ORDER BY repository LIMIT $5) g), '[]'::json)
          ) ORDER BY p.name) FROM page p) AS principals,
         (SELECT json_agg(to_jsonb(x) ORDER BY x.name)
            FROM (SELECT name, created_at FROM arkvory_repositories WHERE $1::text IS NULL ORDER BY name LIMIT $3) x) AS repositories`,
      [after?.[0] ?? null, limit + 1, ACCESS_REPOSITORIES_SHOWN + 1, ACCESS_KEYS_SHOWN + 1, ACCESS_GRANTS_SHOWN + 1],
    );
    const row = r.rows[0]!;
    const dated = (o: Record<string, unknown>, ...fields: string[]) => {
      const out = { ...o };
      for (const f of fields) if (typeof out[f] === 'string') out[f] = new Date(out[f] as string);
      return out;
    };
    const principals = (row.principals ?? []).map((entry): AccessPrincipal => {
      const principal = toPrincipal(dated(entry.principal as Record<string, unknown>, 'created_at'));
      const keys = pageOf(entry.keys as Array<Record<string, unknown>>, ACCESS_KEYS_SHOWN, CURSORS.keys, (k) => [
        k.created_us as string,
        k.key_id as string,
      ]);
      const grants = pageOf(
        entry.grants as Array<{ repository: string; permission: Permission }>,
        ACCESS_GRANTS_SHOWN,
        CURSORS.grants,
        (g) => [principal.name, g.repository],
      );
      return {
        ...principal,
        keys: keys.items.map((k) => toKey(dated(k, 'created_at', 'expires_at', 'revoked_at', 'last_used_at'))),
        keysNextCursor: keys.nextCursor,
        grants: grants.items,
        grantsNextCursor: grants.nextCursor,
      };
    });
    const repositories = (row.repositories ?? []).map((x) => ({
      name: x.name as string,
      createdAt: new Date(x.created_at as string).toISOString(),
    }));
    return {
      principals: pageOf(principals, limit, CURSORS.access, (p) => [p.name]),
      repositories:
        after === undefined
          ? pageOf(repositories, ACCESS_REPOSITORIES_SHOWN, CURSORS.repositories, (x) => [x.name])
          : null,
    };
  }

  /** Finds a principal by id or name. */
  async findPrincipal(ref: string): Promise<PrincipalRow> {
    // Neither an id nor a possible name (e.g. a NUL byte, which PostgreSQL refuses in text): no such principal.
    if (!UUID.test(ref) && !PRINCIPAL_NAME.test(ref)) throw noSuchPrincipal(ref);
    const r = UUID.test(ref)
      ? await this.#pool.query('SELECT * FROM arkvory_principals WHERE id = $1', [ref])
      : await this.#pool.query('SELECT * FROM arkvory_principals WHERE name = $1', [ref]);
    if (!r.rows[0]) throw noSuchPrincipal(ref);
    return toPrincipal(r.rows[0]);
  }

  async setPrincipalDisabled(ref: string, disabled: boolean): Promise<PrincipalRow> {
    const p = await this.findPrincipal(ref);
    const r = await this.#pool.query('UPDATE arkvory_principals SET disabled = $2 WHERE id = $1 RETURNING *', [
      p.id,
      disabled,
    ]);
    return toPrincipal(r.rows[0]);
  }

  /** Sets the principal's bandwidth weight; every gateway applies it to transfers it meters from then on. */
  async setPrincipalWeight(ref: string, weight: unknown): Promise<PrincipalRow> {
    if (typeof weight !== 'number' || !Number.isSafeInteger(weight) || weight < 1 || weight > MAX_BANDWIDTH_WEIGHT)
      throw new PolicyError(
        'invalid_request',
        `bandwidthWeight must be an integer from 1 to ${MAX_BANDWIDTH_WEIGHT}, got ${quoted(weight)}`,
      );
    const p = await this.findPrincipal(ref);
    const r = await this.#pool.query('UPDATE arkvory_principals SET bandwidth_weight = $2 WHERE id = $1 RETURNING *', [
      p.id,
      weight,
    ]);
    return toPrincipal(r.rows[0]);
  }

  async createKey(
    principalRef: string,
    options: { scopes: Scope[]; expiresInSeconds?: number; kind?: 'service' | 'personal'; description?: string },
  ): Promise<CreatedKey> {
    const p = await this.findPrincipal(principalRef);
    const scopes = parseScopes(options.scopes);
    const kind = options.kind ?? 'service';
    if (kind !== 'service' && kind !== 'personal')
      throw new PolicyError('invalid_request', 'kind must be service or personal');
    const expires = checkKeyLifetime(options.expiresInSeconds);
    if (options.description !== undefined && options.description.length > MAX_KEY_DESCRIPTION_LENGTH)
      throw new PolicyError('invalid_request', `description must be at most ${MAX_KEY_DESCRIPTION_LENGTH} characters`);
    const generated = generateKey();
    const r = await this.#pool.query(
      `INSERT INTO arkvory_api_keys (key_id, principal_id, kind, secret_sha256, scopes, description, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::bigint IS NULL THEN NULL ELSE now() + make_interval(secs => $7::bigint) END)
       RETURNING *`,
      [generated.keyId, p.id, kind, generated.secretSha256, scopes, options.description ?? null, expires ?? null],
    );
    return { ...toKey(r.rows[0]), key: generated.key };
  }

  /** One page of a principal's keys, oldest first. */
  async listKeys(principalRef: string, page: PageRequest = {}): Promise<Page<KeyRow>> {
    const limit = pageLimit(page.limit);
    // Its microseconds at most 18 digits (page.ts): 19 may pass a bigint, which PostgreSQL refuses with a 500.
    const after = decodeCursor(page.cursor, CURSORS.keys);
    const p = await this.findPrincipal(principalRef);
    // The cursor keeps created_at in microseconds as text: a JS Date would round it to milliseconds.
    const r = await this.#pool.query(
      `SELECT *, (extract(epoch FROM created_at) * 1000000)::bigint::text AS created_us FROM arkvory_api_keys
       WHERE principal_id = $1 AND ($2::bigint IS NULL OR ((extract(epoch FROM created_at) * 1000000)::bigint, key_id) > ($2::bigint, $3::text))
       ORDER BY created_at, key_id LIMIT $4`,
      [p.id, after?.[0] ?? null, after?.[1] ?? null, limit + 1],
    );
    const found = pageOf(r.rows, limit, CURSORS.keys, (row) => [row.created_us as string, row.key_id as string]);
    return { items: found.items.map(toKey), nextCursor: found.nextCursor };
  }

  async revokeKey(keyId: string): Promise<KeyRow> {
    if (!KEY_ID.test(keyId)) throw noSuchKey(keyId);
    const r = await this.#pool.query(
      'UPDATE arkvory_api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = $1 RETURNING *',
      [keyId],
    );
    if (!r.rows[0]) throw noSuchKey(keyId);
    return toKey(r.rows[0]);
  }

  /** The key `keyId` (no secret), or 404. */
  async findKey(keyId: string): Promise<KeyRow> {
    if (!KEY_ID.test(keyId)) throw noSuchKey(keyId);
    const r = await this.#pool.query('SELECT * FROM arkvory_api_keys WHERE key_id = $1', [keyId]);
    if (!r.rows[0]) throw noSuchKey(keyId);
    return toKey(r.rows[0]);
  }

  /**
   * A new key for the same principal, scopes, kind and expiry (a later one when asked); the old one
   * keeps working until revoked. A revoked or expired key is not renewed: rotation must not turn a
   * key that was meant to end into one that does not.
   */
  async rotateKey(keyId: string, options: { expiresInSeconds?: number } = {}, nowMs = Date.now()): Promise<CreatedKey> {
    const old = await this.findKey(keyId);
    if (old.revokedAt) throw new PolicyError('conflict', `key "${keyId}" is revoked; create a new key instead`);
    const expiresAtMs = old.expiresAt === null ? undefined : Date.parse(old.expiresAt);
    if (expiresAtMs !== undefined && expiresAtMs <= nowMs)
      throw new PolicyError('conflict', `key "${keyId}" has expired; create a new key instead`);
    const expiresInSeconds =
      options.expiresInSeconds ?? (expiresAtMs === undefined ? undefined : Math.ceil((expiresAtMs - nowMs) / 1000));
    return this.createKey(old.principalId, {
      scopes: old.scopes,
      kind: old.kind,
      description: `rotated from ${keyId}`,
      ...(expiresInSeconds ? { expiresInSeconds } : {}),
    });
  }

  /** Binds a client certificate's SAN (URI:… or DNS:…, exact) to the principal; a SAN binds one principal only. */
  async bindCertificate(principalRef: string, san: string, scopes: Scope[]): Promise<CertificateBindingRow> {
    const canonical = normalizeSan(san);
    const parsed = parseScopes(scopes);
    const p = await this.findPrincipal(principalRef);
    try {
      const r = await this.#pool.query(
        'INSERT INTO arkvory_certificate_bindings (san, principal_id, scopes) VALUES ($1, $2, $3) RETURNING *',
        [canonical, p.id, parsed],
      );
      return toBinding(r.rows[0], p.name);
    } catch (err) {
      if (isUniqueViolation(err))
        throw new PolicyError('conflict', `${canonical} is already bound; unbind it first`, { cause: err });
      throw err;
    }
  }

  async unbindCertificate(principalRef: string, san: string): Promise<void> {
    const canonical = normalizeSan(san);
    const p = await this.findPrincipal(principalRef);
    const r = await this.#pool.query('DELETE FROM arkvory_certificate_bindings WHERE principal_id = $1 AND san = $2', [
      p.id,
      canonical,
    ]);
    if (!r.rowCount) throw new PolicyError('not_found', `"${p.name}" has no binding for ${canonical}`);
  }

  /** One page of a principal's certificate bindings, by SAN. */
  async listCertificates(principalRef: string, page: PageRequest = {}): Promise<Page<CertificateBindingRow>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.certificates);
    const p = await this.findPrincipal(principalRef);
    const r = await this.#pool.query(
      `SELECT * FROM arkvory_certificate_bindings WHERE principal_id = $1 AND ($2::text IS NULL OR san > $2)
       ORDER BY san LIMIT $3`,
      [p.id, after?.[0] ?? null, limit + 1],
    );
    return pageOf(
      r.rows.map((row) => toBinding(row, p.name)),
      limit,
      CURSORS.certificates,
      (b) => [b.san],
    );
  }

  async createRepository(name: string): Promise<{ name: string; createdAt: string }> {
    checkRepositoryName(name);
    try {
      const r = await this.#pool.query('INSERT INTO arkvory_repositories (name) VALUES ($1) RETURNING *', [name]);
      return { name: r.rows[0].name, createdAt: (r.rows[0].created_at as Date).toISOString() };
    } catch (err) {
      if (isUniqueViolation(err))
        throw new PolicyError('conflict', `repository "${name}" already exists`, { cause: err });
      throw err;
    }
  }

  /**
   * One page of repositories, by name; with `prefix`, only those whose name starts with it (the
   * console's repository picker: an operator with thousands of repositories types the start of one
   * rather than paging to it). A prefix is checked like a name's start, so nothing else reaches SQL.
   */
  async listRepositories(page: PageRequest = {}, prefix?: unknown): Promise<Page<{ name: string; createdAt: string }>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.repositories);
    const start = checkRepositoryPrefix(prefix);
    const r = await this.#pool.query(
      `SELECT * FROM arkvory_repositories
        WHERE ($1::text IS NULL OR name > $1) AND ($3::text IS NULL OR starts_with(name, $3))
        ORDER BY name LIMIT $2`,
      [after?.[0] ?? null, limit + 1, start ?? null],
    );
    return pageOf(
      r.rows.map((row) => ({ name: row.name as string, createdAt: (row.created_at as Date).toISOString() })),
      limit,
      CURSORS.repositories,
      (row) => [row.name],
    );
  }

  /**
   * Creates or changes a group of principals and its ceilings (bytes/s, 0 = none; an option left
   * out keeps its value, or 0 for a new group).
   */
  async setGroup(
    name: string,
    ceilings: { downloadBytesPerSec?: number; uploadBytesPerSec?: number },
    written?: () => void,
  ): Promise<GroupRow> {
    checkGroupName(name);
    const down = ceilingRate(ceilings.downloadBytesPerSec, 'downloadBytesPerSec');
    const up = ceilingRate(ceilings.uploadBytesPerSec, 'uploadBytesPerSec');
    await this.#pool.query(
      `INSERT INTO arkvory_principal_groups (name, download_bytes_per_second, upload_bytes_per_second)
       VALUES ($1, coalesce($2::bigint, 0), coalesce($3::bigint, 0))
       ON CONFLICT (name) DO UPDATE SET
         download_bytes_per_second = coalesce($2::bigint, arkvory_principal_groups.download_bytes_per_second),
         upload_bytes_per_second = coalesce($3::bigint, arkvory_principal_groups.upload_bytes_per_second)`,
      [name, down ?? null, up ?? null],
    );
    written?.();
    return this.findGroup(name);
  }

  async findGroup(name: string): Promise<GroupRow> {
    const groups = await this.#groups(name);
    if (!groups[0]) throw new PolicyError('not_found', `no group ${quoted(name)}`);
    return groups[0];
  }

  /**
   * One page of groups, by name (the admin API's listing): an operator with thousands of groups
   * got them all in one answer, each with its members.
   */
  async listGroupsPage(page: PageRequest = {}): Promise<Page<GroupRow>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.groups);
    return pageOf(
      await this.#groups(null, { after: after?.[0] ?? null, limit: limit + 1 }),
      limit,
      CURSORS.groups,
      (g) => [g.name],
    );
  }

  /** One page of a group's members (principal names), by name; an unknown group is `not_found`. */
  async listGroupMembers(group: string, page: PageRequest = {}): Promise<Page<string>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.groupMembers);
    const r = await this.#pool.query(
      `SELECT g.name AS group_name, x.name
         FROM arkvory_principal_groups g
         LEFT JOIN LATERAL (
           SELECT p.name FROM arkvory_principal_group_members m JOIN arkvory_principals p ON p.id = m.principal_id
            WHERE m.group_name = g.name AND ($2::text IS NULL OR p.name > $2)
            ORDER BY p.name LIMIT $3
         ) x ON true
        WHERE g.name = $1
        ORDER BY x.name`,
      [group, after?.[0] ?? null, limit + 1],
    );
    if (!r.rows[0]) throw new PolicyError('not_found', `no group ${quoted(group)}`);
    const names = r.rows.flatMap((row) => (row.name === null ? [] : [row.name as string]));
    return pageOf(names, limit, CURSORS.groupMembers, (n) => [n]);
  }

  /**
   * Groups with their ceilings and their first members: each group's members are read with a
   * bound of their own (a lateral join), so one large group costs one page of names.
   */
  async #groups(name: string | null, page?: { after: string | null; limit: number }): Promise<GroupRow[]> {
    const r = await this.#pool.query(
      `SELECT g.name, g.download_bytes_per_second::text AS down, g.upload_bytes_per_second::text AS up,
              coalesce((SELECT array_agg(x.name ORDER BY x.name)
                          FROM (SELECT p.name FROM arkvory_principal_group_members m
                                  JOIN arkvory_principals p ON p.id = m.principal_id
                                 WHERE m.group_name = g.name ORDER BY p.name LIMIT $4) x), '{}') AS members
       FROM arkvory_principal_groups g
       WHERE ($1::text IS NULL OR g.name = $1) AND ($2::text IS NULL OR g.name > $2)
       ORDER BY g.name LIMIT $3`,
      [name, page?.after ?? null, page?.limit ?? null, GROUP_MEMBERS_SHOWN + 1],
    );
    return r.rows.map((row) => {
      const members = pageOf(row.members as string[], GROUP_MEMBERS_SHOWN, CURSORS.groupMembers, (n) => [n]);
      return {
        name: row.name as string,
        downloadBytesPerSec: Number(row.down),
        uploadBytesPerSec: Number(row.up),
        members: members.items,
        membersNextCursor: members.nextCursor,
      };
    });
  }

  async deleteGroup(name: string): Promise<void> {
    const r = await this.#pool.query('DELETE FROM arkvory_principal_groups WHERE name = $1', [name]);
    if (!r.rowCount) throw new PolicyError('not_found', `no group ${quoted(name)}`);
  }

  /**
   * Puts a principal in a group (again: no change); a principal may be in several groups. `written`
   * (here and in setGroup, removeGroupMember) is called once the change is made, before the group is
   * read back for the answer: a read that fails then leaves the change made.
   */
  async addGroupMember(group: string, principalRef: string, written?: () => void): Promise<GroupRow> {
    await this.findGroup(group);
    const p = await this.findPrincipal(principalRef);
    try {
      await this.#pool.query(
        'INSERT INTO arkvory_principal_group_members (group_name, principal_id) VALUES ($1, $2) ON CONFLICT DO NOTHING',
        [group, p.id],
      );
    } catch (err) {
      // The group was deleted after it was found (a concurrent delete): the same answer as before it.
      if ((err as { code?: string }).code === '23503') throw new PolicyError('not_found', `no group ${quoted(group)}`);
      throw err;
    }
    written?.();
    return this.findGroup(group);
  }

  async removeGroupMember(group: string, principalRef: string, written?: () => void): Promise<GroupRow> {
    await this.findGroup(group);
    const p = await this.findPrincipal(principalRef);
    await this.#pool.query('DELETE FROM arkvory_principal_group_members WHERE group_name = $1 AND principal_id = $2', [
      group,
      p.id,
    ]);
    written?.();
    return this.findGroup(group);
  }

  /** A repository's ceilings (bytes/s, 0 = none) and its bound on concurrent transfers (0 = none). */
  async findRepositoryCeilings(repository: string): Promise<RepositoryCeilingsRow> {
    const rows = await this.#repositoryCeilings(repository);
    if (!rows[0]) throw new PolicyError('not_found', `no repository ${quoted(repository)}`);
    return rows[0];
  }

  /** One page of the repositories with a ceiling or a bound set, by name (the admin API's listing). */
  async listRepositoryCeilingsPage(page: PageRequest = {}): Promise<Page<RepositoryCeilingsRow>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.repositoryCeilings);
    const rows = await this.#repositoryCeilings(null, { after: after?.[0] ?? null, limit: limit + 1 });
    return pageOf(rows, limit, CURSORS.repositoryCeilings, (r) => [r.name]);
  }

  async #repositoryCeilings(
    name: string | null,
    page?: { after: string | null; limit: number },
  ): Promise<RepositoryCeilingsRow[]> {
    const r = await this.#pool.query(
      `SELECT name, download_bytes_per_second::text AS down, upload_bytes_per_second::text AS up, max_transfers
       FROM arkvory_repositories
       WHERE CASE WHEN $1::text IS NULL
                  THEN download_bytes_per_second > 0 OR upload_bytes_per_second > 0 OR max_transfers > 0
                  ELSE name = $1 END
         AND ($2::text IS NULL OR name > $2)
       ORDER BY name LIMIT $3`,
      [name, page?.after ?? null, page?.limit ?? null],
    );
    return r.rows.map(repositoryCeilingsRow);
  }

  /** Sets a repository's ceilings (bytes/s, 0 = none) and its bound on concurrent transfers (0 = none). */
  async setRepositoryCeilings(
    repository: string,
    ceilings: { downloadBytesPerSec?: number; uploadBytesPerSec?: number; maxTransfers?: number },
  ): Promise<RepositoryCeilingsRow> {
    const down = ceilingRate(ceilings.downloadBytesPerSec, 'downloadBytesPerSec');
    const up = ceilingRate(ceilings.uploadBytesPerSec, 'uploadBytesPerSec');
    const max = ceilings.maxTransfers;
    if (max !== undefined && (!Number.isSafeInteger(max) || max < 0 || max > MAX_REPOSITORY_TRANSFERS))
      throw new PolicyError(
        'invalid_request',
        `maxTransfers must be an integer from 0 (no bound) to ${MAX_REPOSITORY_TRANSFERS}, got ${max}`,
      );
    const r = await this.#pool.query(
      `UPDATE arkvory_repositories SET
         download_bytes_per_second = coalesce($2::bigint, download_bytes_per_second),
         upload_bytes_per_second = coalesce($3::bigint, upload_bytes_per_second),
         max_transfers = coalesce($4::integer, max_transfers)
       WHERE name = $1
       RETURNING name, download_bytes_per_second::text AS down, upload_bytes_per_second::text AS up, max_transfers`,
      [repository, down ?? null, up ?? null, max ?? null],
    );
    const row = r.rows[0];
    if (!row) throw new PolicyError('not_found', `no repository ${quoted(repository)}`);
    return repositoryCeilingsRow(row);
  }

  async addGrant(principalRef: string, repository: string, permission: Permission): Promise<GrantRow> {
    if (permission !== 'read' && permission !== 'write')
      throw new PolicyError('invalid_request', 'permission must be read or write');
    const p = await this.findPrincipal(principalRef);
    const repo = await this.#pool.query('SELECT 1 FROM arkvory_repositories WHERE name = $1', [repository]);
    if (!repo.rowCount) throw new PolicyError('not_found', `no repository ${quoted(repository)}`);
    await this.#pool.query(
      `INSERT INTO arkvory_grants (principal_id, repository, permission) VALUES ($1, $2, $3)
       ON CONFLICT (principal_id, repository) DO UPDATE SET permission = EXCLUDED.permission`,
      [p.id, repository, permission],
    );
    return { principalId: p.id, principalName: p.name, repository, permission };
  }

  async removeGrant(principalRef: string, repository: string): Promise<void> {
    const p = await this.findPrincipal(principalRef);
    const r = await this.#pool.query('DELETE FROM arkvory_grants WHERE principal_id = $1 AND repository = $2', [
      p.id,
      repository,
    ]);
    if (!r.rowCount) throw new PolicyError('not_found', `"${p.name}" has no grant on ${quoted(repository)}`);
  }

  /** One page of grants (of one principal, or of all), by principal name and repository. */
  async listGrants(principalRef?: string, page: PageRequest = {}): Promise<Page<GrantRow>> {
    const limit = pageLimit(page.limit);
    const after = decodeCursor(page.cursor, CURSORS.grants);
    const p = principalRef === undefined ? undefined : await this.findPrincipal(principalRef);
    const r = await this.#pool.query(
      `SELECT g.principal_id, p.name, g.repository, g.permission FROM arkvory_grants g JOIN arkvory_principals p ON p.id = g.principal_id
       WHERE ($1::uuid IS NULL OR g.principal_id = $1) AND ($2::text IS NULL OR (p.name, g.repository) > ($2::text, $3::text))
       ORDER BY p.name, g.repository LIMIT $4`,
      [p?.id ?? null, after?.[0] ?? null, after?.[1] ?? null, limit + 1],
    );
    return pageOf(
      r.rows.map((row) => ({
        principalId: row.principal_id,
        principalName: row.name,
        repository: row.repository,
        permission: row.permission,
      })),
      limit,
      CURSORS.grants,
      (g) => [g.principalName, g.repository],
    );
  }
}
