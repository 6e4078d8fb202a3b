/**
 * `arkvory db roles`: the group roles of grants.ts created (NOLOGIN) or left as they are, every
 * object of the schema handed to the migrator, and each runtime role's grants made exactly what
 * grants.ts says (everything else revoked). Idempotent; `migrate` re-applies the grants after every
 * migration it runs once the roles exist, so a new table is never left to its default privileges.
 */
import type pg from 'pg';
import {
  DATABASE_ROLES,
  FUNCTION_GRANTS,
  grantsOf,
  groupRoleName,
  RUNTIME_ROLES,
  SEQUENCE_GRANTS,
  TABLE_GRANTS,
} from './grants.ts';

const MIGRATOR = groupRoleName('migrator');
const RUNTIME_NAMES = RUNTIME_ROLES.map(groupRoleName).join(', ');

/** Quotes an identifier for SQL (role and object names here are our own, but never trust a name). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Whether `db roles` has run on this database: the migrator exists and may create in `public`. */
export async function rolesInstalled(client: pg.ClientBase): Promise<boolean> {
  const r = await client.query<{ ok: boolean }>(
    `SELECT to_regrole($1) IS NOT NULL AND has_schema_privilege($1, 'public', 'CREATE') AS ok`,
    [MIGRATOR],
  );
  return r.rows[0]!.ok;
}

/**
 * Creates the missing group roles. Roles are cluster-wide: two databases (or two runs) creating the
 * same role at once race, and the loser's duplicate is harmless.
 */
async function ensureGroupRoles(client: pg.ClientBase): Promise<string[]> {
  const created: string[] = [];
  for (const role of DATABASE_ROLES) {
    const name = groupRoleName(role);
    const exists = await client.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [name]);
    if (exists.rowCount) continue;
    await client.query('SAVEPOINT arkvory_create_role');
    try {
      await client.query(`CREATE ROLE ${quoteIdent(name)} NOLOGIN`);
      await client.query('RELEASE SAVEPOINT arkvory_create_role');
      created.push(name);
    } catch (err) {
      await client.query('ROLLBACK TO SAVEPOINT arkvory_create_role');
      const code = (err as { code?: string }).code;
      // 42710: created meanwhile; 23505/XX000: the same, seen by the catalog's own unique index.
      if (code !== '42710' && code !== '23505' && code !== 'XX000') throw err;
    }
  }
  return created;
}

/** Tables, sequences and functions of ours in `public`, with their owners. */
export async function schemaObjects(
  client: pg.ClientBase | pg.Pool,
): Promise<Array<{ kind: 'table' | 'sequence' | 'function'; name: string; owner: string }>> {
  const relations = await client.query<{ kind: string; name: string; owner: string }>(
    `SELECT CASE c.relkind WHEN 'S' THEN 'sequence' ELSE 'table' END AS kind, c.relname AS name, pg_get_userbyid(c.relowner) AS owner
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S') AND c.relname LIKE 'arkvory\\_%'
      ORDER BY 1, 2`,
  );
  const functions = await client.query<{ name: string; owner: string }>(
    `SELECT p.oid::regprocedure::text AS name, pg_get_userbyid(p.proowner) AS owner
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = 'public' AND p.proname LIKE 'arkvory\\_%' ORDER BY 1`,
  );
  return [
    ...relations.rows.map((r) => ({ kind: r.kind as 'table' | 'sequence', name: r.name, owner: r.owner })),
    ...functions.rows.map((f) => ({ kind: 'function' as const, name: f.name, owner: f.owner })),
  ];
}

/**
 * Makes every runtime role's privileges on our objects exactly those of grants.ts. Run by the owner
 * (the migrator) or a superuser, inside the caller's transaction. Objects grants.ts does not know
 * yet (a migration newer than this code) get nothing.
 */
export async function applyGrants(client: pg.ClientBase): Promise<void> {
  const objects = await schemaObjects(client);
  const present = new Set(objects.map((o) => `${o.kind}:${o.name}`));
  for (const o of objects) {
    const keyword = o.kind === 'table' ? 'TABLE' : o.kind === 'sequence' ? 'SEQUENCE' : 'FUNCTION';
    // Table-level REVOKE also revokes every column grant of the table.
    await client.query(`REVOKE ALL ON ${keyword} ${o.name} FROM ${RUNTIME_NAMES}`);
    if (o.kind === 'function') await client.query(`REVOKE ALL ON FUNCTION ${o.name} FROM PUBLIC`);
  }
  for (const role of RUNTIME_ROLES) {
    for (const line of grantsOf(role)) {
      if (present.has(`${line.kind}:${line.object}`)) await client.query(line.sql);
    }
  }
}

/** Objects whose grant decision grants.ts lacks (the test and `db roles` report them). */
export async function undecidedObjects(client: pg.ClientBase | pg.Pool): Promise<string[]> {
  const decided = {
    table: TABLE_GRANTS,
    sequence: SEQUENCE_GRANTS,
    function: FUNCTION_GRANTS,
  } as const;
  return (await schemaObjects(client))
    .filter((o) => !Object.hasOwn(decided[o.kind], o.name))
    .map((o) => `${o.kind} ${o.name}`);
}

export interface RolesResult {
  created: string[];
  ownerChanged: string[];
  undecided: string[];
}

/**
 * The whole of `db roles`, in the caller's transaction, connected as a superuser or as a role with
 * CREATEROLE that owns the schema's objects (the role that ran the migrations until now).
 */
export async function installRoles(client: pg.ClientBase): Promise<RolesResult> {
  const created = await ensureGroupRoles(client);
  const me = await client.query<{ superuser: boolean; member: boolean }>(
    `SELECT rolsuper AS superuser, pg_has_role(current_user, $1, 'MEMBER') AS member FROM pg_roles WHERE rolname = current_user`,
    [MIGRATOR],
  );
  // Handing an object to a role needs membership in it (superusers need none).
  if (!me.rows[0]!.superuser && !me.rows[0]!.member)
    await client.query(`GRANT ${quoteIdent(MIGRATOR)} TO CURRENT_USER`);
  await client.query(`GRANT USAGE, CREATE ON SCHEMA public TO ${quoteIdent(MIGRATOR)}`);
  const ownerChanged: string[] = [];
  for (const o of await schemaObjects(client)) {
    if (o.owner === MIGRATOR) continue;
    // A sequence owned by a column moves with its table.
    if (o.kind === 'sequence') {
      const owned = await client.query(
        `SELECT 1 FROM pg_depend d JOIN pg_class s ON s.oid = d.objid WHERE s.relname = $1 AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0`,
        [o.name],
      );
      if (owned.rowCount) continue;
    }
    const keyword = o.kind === 'table' ? 'TABLE' : o.kind === 'sequence' ? 'SEQUENCE' : 'FUNCTION';
    await client.query(`ALTER ${keyword} ${o.name} OWNER TO ${quoteIdent(MIGRATOR)}`);
    ownerChanged.push(`${o.kind} ${o.name} (was ${o.owner})`);
  }
  await applyGrants(client);
  return { created, ownerChanged, undecided: await undecidedObjects(client) };
}
