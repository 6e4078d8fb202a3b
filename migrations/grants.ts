/**
 * The database roles, and what each may do, object by object: the one grant decision every table,
 * sequence and function of the schema needs (migrations/grants.int.test.ts fails on an object
 * without one). Derived from the SQL each role's code runs (docs/deploy.md has the table):
 * - writer: the api role, its embedded completion worker, the admin API and the admin CLI commands;
 * - reader: the read path (keys, grants, catalog, pre-sign secrets), its lease, `last_used_at`,
 *   forwarding-peer diagnostics; the router's lease discovery uses it too;
 * - worker: the completion worker (jobs, sessions, parts, the catalog insert);
 * - maintenance: scrub, gc, backup, restore, `policy reset` (data, never the schema);
 * - rules: the reference rules service (its overrides, and key checks for its admin routes);
 * - migrator: owns every object; runs migrations and `db roles`. No runtime role owns anything.
 * Group roles are NOLOGIN: logins are made members of them (`CREATE ROLE … LOGIN IN ROLE …`).
 */

export const RUNTIME_ROLES = ['writer', 'reader', 'worker', 'maintenance', 'rules'] as const;
export type RuntimeRole = (typeof RUNTIME_ROLES)[number];
export type DatabaseRole = RuntimeRole | 'migrator';
export const DATABASE_ROLES: readonly DatabaseRole[] = ['migrator', ...RUNTIME_ROLES];

/** The PostgreSQL name of a group role: `arkvory_writer`, … */
export function groupRoleName(role: DatabaseRole): string {
  return `arkvory_${role}`;
}

/**
 * A privilege as GRANT spells it: `SELECT`, `INSERT`, `DELETE`, or `UPDATE (col, …)` / `INSERT (col, …)`
 * for a column grant (a role may change, or give a new row, those columns and no other: the rest
 * take their defaults). Whole-table UPDATE is spelt `UPDATE`.
 */
export type TablePrivilege = 'SELECT' | 'INSERT' | 'DELETE' | 'UPDATE' | `UPDATE (${string})` | `INSERT (${string})`;
export type SequencePrivilege = 'USAGE' | 'SELECT' | 'UPDATE';

type Decision<P> = Readonly<Partial<Record<RuntimeRole, readonly P[]>>>;

const READ = ['SELECT'] as const;
const ALL_DATA = ['SELECT', 'INSERT', 'UPDATE', 'DELETE'] as const;

/** The audit trail's columns a recording process writes (proxy/audit/audit-log.ts); never `id` or `at`. */
const AUDIT_INSERT =
  'INSERT (action, actor_kind, principal_id, principal_name, operator, host, source, request_id, client_request_id, target, details)' as const;

/** The catalog's columns a publish writes (storage-adapter/catalog/catalog.ts); never `created_at`. */
const ARTIFACT_INSERT =
  'INSERT (repository, kind, name, version, asset, sha256, size_bytes, content_type, published_by)' as const;

/** Every table: which runtime role may do what. A role not named gets nothing. */
export const TABLE_GRANTS: Readonly<Record<string, Decision<TablePrivilege>>> = {
  // pendingMigrations at every start and in every CLI command; restore checks the version.
  arkvory_schema_migrations: {
    writer: READ,
    reader: READ,
    worker: READ,
    maintenance: READ,
    rules: READ,
  },
  // The writer records the storage identity on first start; the others verify it.
  arkvory_storage: {
    writer: ['SELECT', 'INSERT'],
    reader: READ,
    worker: READ,
    maintenance: ALL_DATA,
  },
  // The completion worker reads whether a session's principal is still enabled and still holds write
  // before it publishes (proxy/multipart/completion-authority.ts).
  arkvory_principals: {
    writer: ['SELECT', 'INSERT', 'UPDATE (disabled, bandwidth_weight)'],
    reader: READ,
    worker: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  // Readers (and the rules service) record when a key was used; only the writer revokes one.
  arkvory_api_keys: {
    writer: ['SELECT', 'INSERT', 'UPDATE (revoked_at, last_used_at)'],
    reader: ['SELECT', 'UPDATE (last_used_at)'],
    maintenance: ALL_DATA,
    rules: ['SELECT', 'UPDATE (last_used_at)'],
  },
  arkvory_repositories: {
    writer: ['SELECT', 'INSERT', 'UPDATE (download_bytes_per_second, upload_bytes_per_second, max_transfers)'],
    reader: READ,
    maintenance: ALL_DATA,
  },
  // Groups and their ceilings (0062): the writer's admin commands change them, every gateway reads them;
  // the rules service too, since a key check loads the principal with its groups.
  arkvory_principal_groups: {
    writer: ['SELECT', 'INSERT', 'UPDATE (download_bytes_per_second, upload_bytes_per_second)', 'DELETE'],
    reader: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  arkvory_principal_group_members: {
    writer: ['SELECT', 'INSERT', 'DELETE'],
    reader: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  arkvory_grants: {
    writer: ['SELECT', 'INSERT', 'UPDATE (permission)', 'DELETE'],
    reader: READ,
    worker: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  // When a principal's grant on a repository was last removed (0078): written only by the grants'
  // trigger, as the schema owner; read with the grants by every key check (so the rules service too).
  arkvory_grant_removals: {
    writer: READ,
    reader: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  // Bumped by the owner's trigger functions (0020), read by every cache.
  arkvory_auth_epoch: {
    writer: READ,
    reader: READ,
    worker: READ,
    maintenance: READ,
    rules: READ,
  },
  arkvory_catalog_epoch: {
    writer: READ,
    reader: READ,
    worker: READ,
    maintenance: READ,
  },
  // A publish names every column but created_at (its Last-Modified), which the database dates (0087).
  arkvory_artifacts: {
    writer: ['SELECT', ARTIFACT_INSERT, 'DELETE'],
    reader: READ,
    worker: ['SELECT', ARTIFACT_INSERT],
    maintenance: ALL_DATA,
  },
  // When recently deleted names were published (0075): written and read only by the catalog's
  // triggers, as the schema owner; maintenance backs it up and restores it like every table.
  arkvory_artifact_tombstones: {
    maintenance: ALL_DATA,
  },
  // The writer records the shared policy on first start; `policy reset` (maintenance) removes it.
  arkvory_download_policy: {
    writer: ['SELECT', 'INSERT'],
    reader: READ,
    maintenance: ['SELECT', 'INSERT', 'DELETE'],
  },
  // Written only through arkvory_lease_acquire/renew (0020); read by discovery, doctor, console.
  arkvory_gateway_leases: {
    writer: READ,
    reader: READ,
    maintenance: ALL_DATA,
  },
  // Rule documents without Redis (standalone writer only) and the CLI's `ratelimit` commands.
  arkvory_rate_limit_rules: {
    writer: ['SELECT', 'INSERT', 'UPDATE (document, updated_at)', 'DELETE'],
    reader: READ,
    maintenance: ALL_DATA,
  },
  arkvory_rate_limit_orphans: {
    writer: ['SELECT', 'INSERT', 'DELETE'],
    maintenance: ALL_DATA,
  },
  arkvory_upload_sessions: {
    writer: ['SELECT', 'INSERT', 'UPDATE (state, error, result_sha256, result_size, finished_at)'],
    worker: ['SELECT', 'UPDATE (state, error, result_sha256, result_size, finished_at)'],
    maintenance: ALL_DATA,
  },
  arkvory_upload_parts: {
    writer: ['SELECT', 'INSERT', 'UPDATE (size_bytes, sha256, file_name, received_at)', 'DELETE'],
    worker: ['SELECT', 'DELETE'],
    maintenance: ALL_DATA,
  },
  arkvory_upload_jobs: {
    writer: ['SELECT', 'INSERT', 'UPDATE (state, attempts, error, updated_at)'],
    worker: ['SELECT', 'UPDATE (state, attempts, error, updated_at)'],
    maintenance: ALL_DATA,
  },
  arkvory_rule_overrides: {
    maintenance: ALL_DATA,
    rules: ['SELECT', 'INSERT', 'UPDATE (rules, updated_at)', 'DELETE'],
  },
  // The writer creates the first secret and `presign-secret rotate` retires old ones; readers verify.
  arkvory_presign_secrets: {
    writer: ['SELECT', 'INSERT', 'UPDATE (retires_at)'],
    reader: READ,
    maintenance: ALL_DATA,
  },
  arkvory_forwarding_peers: {
    writer: ['SELECT', 'INSERT', 'UPDATE (last_seen_at)'],
    reader: ['SELECT', 'INSERT', 'UPDATE (last_seen_at)'],
    maintenance: ALL_DATA,
  },
  // Bound client certificates: bound and unbound through the admin API (writer); every gateway
  // authenticates with them (and the rules service, whose admin routes authenticate like a gateway).
  arkvory_certificate_bindings: {
    writer: ['SELECT', 'INSERT', 'DELETE'],
    reader: READ,
    maintenance: ALL_DATA,
    rules: READ,
  },
  // Slice digests: recorded at publish (writer, worker), by scrub's backfill and restore; read by
  // every gateway's slice cache; deleted by gc and scrub (maintenance).
  arkvory_blob_slices: {
    writer: ['SELECT', 'INSERT'],
    reader: READ,
    worker: ['SELECT', 'INSERT'],
    maintenance: ALL_DATA,
  },
  // Cache purge requests: made through the admin API and CLI (writer), which also drops day-old ones;
  // every gateway reads the new ones.
  arkvory_cache_purges: {
    writer: ['SELECT', 'INSERT', 'DELETE'],
    reader: READ,
    maintenance: ALL_DATA,
  },
  // Storage quotas: set through the admin API and CLI (writer), read by every upload's reservation
  // and by the worker's check of a multipart completion its session does not wholly hold.
  arkvory_storage_quotas: {
    writer: ['SELECT', 'INSERT', 'UPDATE (limit_bytes, updated_at)', 'DELETE'],
    worker: READ,
    maintenance: ALL_DATA,
  },
  // Uploads in progress: reserved (pinned to a blob or not), extended, renewed and released by the
  // writer, settled by its catalog insert (a multipart session's by the worker's, which reserves the
  // whole of a completion its session does not hold); a new reservation deletes expired ones.
  arkvory_quota_reservations: {
    writer: ['SELECT', 'INSERT', 'UPDATE (bytes, expires_at, sha256)', 'DELETE'],
    worker: ['SELECT', 'INSERT', 'UPDATE (bytes, expires_at, sha256)', 'DELETE'],
    maintenance: ALL_DATA,
  },
  // The audit trail (0040) is append-only for every runtime role: the writer records admin API calls,
  // writes and the admin CLI commands and reads it back (admin API, `arkvory audit`); maintenance
  // records backup, restore, scrub, gc and policy resets and reads it for a backup; the rules
  // service records its rule publications. Old rows go only through arkvory_audit_prune. A row's
  // `id` and `at` are the database's alone (INSERT on the other columns only): a compromised
  // process could otherwise backdate a row, or place one among old ids (OVERRIDING SYSTEM VALUE).
  arkvory_audit_events: {
    writer: ['SELECT', AUDIT_INSERT],
    maintenance: ['SELECT', AUDIT_INSERT],
    rules: [AUDIT_INSERT],
  },
  // Usage statistics (0041): every gateway that serves adds its in-memory counts in batches; the
  // writer reads them for the admin API and `arkvory stats`.
  arkvory_usage_artifacts: {
    writer: ['SELECT', 'INSERT', 'UPDATE (downloads, bytes, last_downloaded_at, last_downloader)'],
    reader: ['SELECT', 'INSERT', 'UPDATE (downloads, bytes, last_downloaded_at, last_downloader)'],
    maintenance: ALL_DATA,
  },
  arkvory_usage_principal_days: {
    writer: ['SELECT', 'INSERT', 'UPDATE (requests, bytes_down, bytes_up)'],
    reader: ['SELECT', 'INSERT', 'UPDATE (requests, bytes_down, bytes_up)'],
    maintenance: ALL_DATA,
  },
};

export const SEQUENCE_GRANTS: Readonly<Record<string, Decision<SequencePrivilege>>> = {
  arkvory_upload_jobs_id_seq: { writer: ['USAGE'], maintenance: ['USAGE', 'SELECT', 'UPDATE'] },
  arkvory_presign_secrets_id_seq: { writer: ['USAGE'], maintenance: ['USAGE', 'SELECT', 'UPDATE'] },
  arkvory_cache_purges_id_seq: { writer: ['USAGE'], maintenance: ['USAGE', 'SELECT', 'UPDATE'] },
  // An identity column's sequence needs no grant to insert; nobody may move it.
  arkvory_audit_events_id_seq: {},
};

/**
 * Every function, by its signature as `regprocedure` prints it. Trigger functions run as part of the statement that
 * fires them and are called by no role: their decision is `{}` (EXECUTE revoked from PUBLIC).
 */
export const FUNCTION_GRANTS: Readonly<Record<string, Decision<'EXECUTE'>>> = {
  'arkvory_auth_changed()': {},
  'arkvory_catalog_changed()': {},
  'arkvory_principal_disabled_at()': {},
  'arkvory_grant_removed()': {},
  'arkvory_blob_slices_backfilled()': {},
  'arkvory_artifact_deleted()': {},
  'arkvory_artifact_created_at()': {},
  'arkvory_lease_acquire(integer,uuid,text,text,double precision)': {
    writer: ['EXECUTE'],
    reader: ['EXECUTE'],
  },
  'arkvory_lease_renew(integer,uuid,bigint,double precision)': { writer: ['EXECUTE'], reader: ['EXECUTE'] },
  // Called only inside the lease functions, as their owner (0074): who may take the writer's slot,
  // and the reservation clamped to a minute.
  'arkvory_lease_may_take(integer,text)': {},
  'arkvory_lease_reservation(double precision)': {},
  // Retention of the audit trail (ARKVORY_AUDIT_RETENTION_DAYS), run by the writer.
  'arkvory_audit_prune(integer)': { writer: ['EXECUTE'] },
  // Deletes finished multipart sessions past their retention (0071): the completion worker's sweep,
  // inside the writer (embedded) or its own process.
  'arkvory_upload_sessions_prune(integer,integer)': { writer: ['EXECUTE'], worker: ['EXECUTE'] },
  // Renews the lease and answers the weighted share (0061).
  'arkvory_lease_share(integer,uuid,bigint,double precision,integer,bigint)': {
    writer: ['EXECUTE'],
    reader: ['EXECUTE'],
  },
};

export interface GrantLine {
  readonly kind: 'table' | 'sequence' | 'function';
  readonly object: string;
  readonly privilege: string;
  /** The statement that gives it, e.g. `GRANT UPDATE (last_used_at) ON TABLE arkvory_api_keys TO arkvory_reader`. */
  readonly sql: string;
}

function lines<P extends string>(
  kind: GrantLine['kind'],
  decisions: Readonly<Record<string, Decision<P>>>,
  role: RuntimeRole,
): GrantLine[] {
  const keyword = kind === 'table' ? 'TABLE' : kind === 'sequence' ? 'SEQUENCE' : 'FUNCTION';
  return Object.entries(decisions).flatMap(([object, decision]) =>
    (decision[role] ?? []).map((privilege) => ({
      kind,
      object,
      privilege,
      sql: `GRANT ${privilege} ON ${keyword} ${object} TO ${groupRoleName(role)}`,
    })),
  );
}

/** Every grant one runtime role holds, in a stable order. */
export function grantsOf(role: RuntimeRole): GrantLine[] {
  return [
    ...lines('table', TABLE_GRANTS, role),
    ...lines('sequence', SEQUENCE_GRANTS, role),
    ...lines('function', FUNCTION_GRANTS, role),
  ];
}

/** The columns of an `UPDATE (a, b)` privilege, or undefined for a table-wide one. */
export function privilegeColumns(privilege: string): { verb: string; columns: string[] | undefined } {
  const m = /^([A-Z]+)\s*\(([^)]*)\)$/.exec(privilege);
  if (!m) return { verb: privilege, columns: undefined };
  return { verb: m[1]!, columns: m[2]!.split(',').map((c) => c.trim()) };
}
