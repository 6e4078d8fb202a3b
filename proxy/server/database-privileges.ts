/**
 * What a gateway's database login may do, checked at start against the grants its role needs
 * (migrations/grants.ts): a missing grant refuses the start naming it, instead of failing on the
 * first request that needs it; a superuser, the schema's owner or a login holding privileges on the
 * schema's objects beyond its role's (a member of another role too) is warned about (or refused
 * under ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE), since a compromised process could then change
 * what its role may not. `arkvory doctor` reports the same.
 */
import type pg from 'pg';
import {
  FUNCTION_GRANTS,
  grantsOf,
  privilegeColumns,
  SEQUENCE_GRANTS,
  TABLE_GRANTS,
  type RuntimeRole,
} from '../../migrations/grants.ts';
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
  /** Privileges it holds on the schema's objects that the role is not granted, e.g. `DELETE ON TABLE arkvory_api_keys`. */
  readonly excess: readonly string[];
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

/** Every privilege a table, sequence or function can be granted. */
const TABLE_VERBS = ['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] as const;
const COLUMN_VERBS: ReadonlySet<string> = new Set(['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']);
const SEQUENCE_VERBS = ['USAGE', 'SELECT', 'UPDATE'] as const;

interface ExcessProbe {
  /** `any`: the verb on the table or any column of it; `other-columns`: on a column not in `columns`. */
  kind: 'any' | 'other-columns' | 'table' | 'sequence' | 'function';
  object: string;
  /** Comma-separated: the columns the role may use the verb on (`other-columns`). */
  columns: string;
  privilege: string;
  text: string;
}

/**
 * What `role` is not granted on the schema's objects (migrations/grants.ts names every one): each
 * verb it lacks on a table (on the table or any of its columns), the columns outside a column grant,
 * and each sequence and function privilege it lacks.
 */
function excessProbesOf(role: RuntimeRole): ExcessProbe[] {
  const probes: ExcessProbe[] = [];
  for (const [object, decision] of Object.entries(TABLE_GRANTS)) {
    const granted = new Map((decision[role] ?? []).map((p) => [privilegeColumns(p).verb, privilegeColumns(p).columns]));
    for (const verb of TABLE_VERBS) {
      const text = `${verb} ON TABLE ${object}`;
      if (!granted.has(verb))
        probes.push({ kind: COLUMN_VERBS.has(verb) ? 'any' : 'table', object, columns: '', privilege: verb, text });
      else {
        const columns = granted.get(verb);
        if (columns)
          probes.push({
            kind: 'other-columns',
            object,
            columns: columns.join(','),
            privilege: verb,
            text: `${text} (columns other than ${columns.join(', ')})`,
          });
      }
    }
  }
  for (const [object, decision] of Object.entries(SEQUENCE_GRANTS))
    for (const verb of SEQUENCE_VERBS)
      if (!(decision[role] ?? []).includes(verb))
        probes.push({ kind: 'sequence', object, columns: '', privilege: verb, text: `${verb} ON SEQUENCE ${object}` });
  for (const [object, decision] of Object.entries(FUNCTION_GRANTS))
    if (!(decision[role] ?? []).includes('EXECUTE'))
      probes.push({
        kind: 'function',
        object,
        columns: '',
        privilege: 'EXECUTE',
        text: `EXECUTE ON FUNCTION ${object}`,
      });
  return probes;
}

/** Reads the login's standing, checks every grant `role` needs and finds any it holds beyond them, in one round trip. */
export async function inspectPrivileges(pool: pg.Pool | pg.ClientBase, role: RuntimeRole): Promise<PrivilegeReport> {
  const probes = probesOf(role);
  const excessProbes = excessProbesOf(role);
  const r = await pool.query<{
    login: string;
    superuser: boolean;
    owner: boolean;
    missing: number[] | null;
    excess: number[] | null;
  }>(
    `WITH p AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS p(kind, object, col, privilege, i)),
          e AS (SELECT * FROM unnest($5::text[], $6::text[], $7::text[], $8::text[]) WITH ORDINALITY AS e(kind, object, cols, privilege, i))
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
               ELSE has_sequence_privilege(object, privilege) END) AS missing,
            (SELECT array_agg(i::int ORDER BY i) FROM e WHERE CASE
               WHEN kind = 'function' THEN to_regprocedure(object) IS NOT NULL AND has_function_privilege(object, privilege)
               WHEN to_regclass(object) IS NULL THEN false
               WHEN kind = 'any' THEN has_any_column_privilege(object, privilege)
               WHEN kind = 'table' THEN has_table_privilege(object, privilege)
               WHEN kind = 'other-columns' THEN EXISTS (
                 SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass(object) AND a.attnum > 0
                    AND NOT a.attisdropped AND a.attname <> ALL (string_to_array(cols, ','))
                    AND has_column_privilege(object, a.attnum, privilege))
               ELSE has_sequence_privilege(object, privilege) END) AS excess`,
    [
      probes.map((p) => p.kind),
      probes.map((p) => p.object),
      probes.map((p) => p.column),
      probes.map((p) => p.privilege),
      excessProbes.map((p) => p.kind),
      excessProbes.map((p) => p.object),
      excessProbes.map((p) => p.columns),
      excessProbes.map((p) => p.privilege),
    ],
  );
  const row = r.rows[0]!;
  const missing = [...new Set((row.missing ?? []).map((i) => probes[i - 1]!.sql))];
  const excess = (row.excess ?? []).map((i) => excessProbes[i - 1]!.text);
  return { login: row.login, needs: role, superuser: row.superuser, schemaOwner: row.owner, missing, excess };
}

/** How many excess privileges a line names; a member of arkvory_maintenance holds dozens. */
const EXCESS_SHOWN = 8;

/** Whether the login may do more than its role needs: a superuser, the schema's owner, or privileges beyond the role's. */
export function isPrivileged(report: PrivilegeReport): boolean {
  return report.superuser || report.schemaOwner || report.excess.length > 0;
}

/** One line for the log, doctor and a refused start; names roles and grants, never a secret. */
export function describePrivileges(report: PrivilegeReport): string {
  if (report.missing.length)
    return `database login "${report.login}" lacks ${report.missing.length} grant(s) the ${report.needs} role needs: ${report.missing.join('; ')}; run \`arkvory db roles\` and make the login a member of arkvory_${report.needs}`;
  if (report.superuser)
    return `database login "${report.login}" is a superuser: a compromised ${report.needs} could rewrite keys, grants and the schema; connect as a login in arkvory_${report.needs} (docs/deploy.md)`;
  if (report.schemaOwner)
    return `database login "${report.login}" owns the schema: a compromised ${report.needs} could rewrite keys, grants and the schema; connect as a login in arkvory_${report.needs} (docs/deploy.md)`;
  if (report.excess.length) {
    const shown = report.excess.slice(0, EXCESS_SHOWN).join('; ');
    const more = report.excess.length > EXCESS_SHOWN ? `; and ${report.excess.length - EXCESS_SHOWN} more` : '';
    return `database login "${report.login}" holds ${report.excess.length} privilege(s) beyond the ${report.needs} role's: ${shown}${more}; a compromised ${report.needs} could use them: connect as a login that is a member of arkvory_${report.needs} alone (docs/deploy.md)`;
  }
  return `database login "${report.login}" holds the ${report.needs} role's grants and no more`;
}
