/**
 * What a gateway's database login may do, checked at start against the grants its role needs
 * (migrations/grants.ts): a missing grant refuses the start naming it, instead of failing on the
 * first request that needs it; a superuser or the schema's owner is warned about (or refused under
 * ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE), since a compromised process could then rewrite
 * anything. `arkvory doctor` reports the same.
 */
import type pg from 'pg';
import { grantsOf, privilegeColumns, type RuntimeRole } from '../../migrations/grants.ts';
import type { Role } from '../config/types.ts';

/** The database role each process role connects as (the writer's grants include its embedded worker). */
export function databaseRoleOf(role: Role): RuntimeRole | undefined {
  switch (role) {
    case 'api':
      return 'writer';
    case 'reader':
      return 'reader';
    case 'worker':
      return 'worker';
    case 'rules-service':
      return 'rules';
    case 'router':
      return undefined;
  }
}

export interface PrivilegeReport {
  /** The login (`current_user`). */
  readonly login: string;
  /** The group role the process role needs, e.g. `writer`. */
  readonly needs: RuntimeRole;
  readonly superuser: boolean;
  /** The login owns the schema's objects, or inherits from their owner (a migrator member). */
  readonly schemaOwner: boolean;
  /** Grants it lacks, as GRANT statements an operator can run (or `arkvory db roles` makes). */
  readonly missing: readonly string[];
}

interface Probe {
  kind: 'table' | 'column' | 'sequence' | 'function';
  object: string;
  column: string;
  privilege: string;
  sql: string;
}

function probesOf(role: RuntimeRole): Probe[] {
  return grantsOf(role).flatMap((line): Probe[] => {
    if (line.kind !== 'table')
      return [
        {
          kind: line.kind,
          object: line.object,
          column: '',
          privilege: line.privilege === 'EXECUTE' ? 'EXECUTE' : line.privilege,
          sql: line.sql,
        },
      ];
    const { verb, columns } = privilegeColumns(line.privilege);
    if (!columns) return [{ kind: 'table', object: line.object, column: '', privilege: verb, sql: line.sql }];
    return columns.map((column) => ({ kind: 'column', object: line.object, column, privilege: verb, sql: line.sql }));
  });
}

/** Reads the login's standing and checks every grant `role` needs, in one round trip. */
export async function inspectPrivileges(pool: pg.Pool | pg.ClientBase, role: RuntimeRole): Promise<PrivilegeReport> {
  const probes = probesOf(role);
  const r = await pool.query<{ login: string; superuser: boolean; owner: boolean; missing: number[] | null }>(
    `WITH p AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS p(kind, object, col, privilege, i))
     SELECT current_user AS login,
            (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
            coalesce((SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c
                       WHERE c.oid = to_regclass('arkvory_artifacts')), false) AS owner,
            (SELECT array_agg(i::int ORDER BY i) FROM p WHERE NOT CASE
               -- An object this database lacks yet is the pending-migrations check's to report.
               WHEN kind = 'function' THEN to_regprocedure(object) IS NULL OR has_function_privilege(object, privilege)
               WHEN to_regclass(object) IS NULL THEN true
               WHEN kind = 'table' THEN has_table_privilege(object, privilege)
               WHEN kind = 'column' THEN has_column_privilege(object, col, privilege)
               ELSE has_sequence_privilege(object, privilege) END) AS missing`,
    [
      probes.map((p) => p.kind),
      probes.map((p) => p.object),
      probes.map((p) => p.column),
      probes.map((p) => p.privilege),
    ],
  );
  const row = r.rows[0]!;
  const missing = [...new Set((row.missing ?? []).map((i) => probes[i - 1]!.sql))];
  return { login: row.login, needs: role, superuser: row.superuser, schemaOwner: row.owner, missing };
}

/** One line for the log, doctor and a refused start; names roles and grants, never a secret. */
export function describePrivileges(report: PrivilegeReport): string {
  if (report.missing.length)
    return `database login "${report.login}" lacks ${report.missing.length} grant(s) the ${report.needs} role needs: ${report.missing.join('; ')}; run \`arkvory db roles\` and make the login a member of arkvory_${report.needs}`;
  if (report.superuser)
    return `database login "${report.login}" is a superuser: a compromised ${report.needs} could rewrite keys, grants and the schema; connect as a login in arkvory_${report.needs} (docs/deploy.md)`;
  if (report.schemaOwner)
    return `database login "${report.login}" owns the schema: a compromised ${report.needs} could rewrite keys, grants and the schema; connect as a login in arkvory_${report.needs} (docs/deploy.md)`;
  return `database login "${report.login}" holds the ${report.needs} role's grants and no more`;
}
