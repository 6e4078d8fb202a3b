/** The start-time privilege check of a gateway role (database-privileges.ts), its log line and metric. */
import type pg from 'pg';
import { PgClient } from '../../lib/pg-client.ts';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Config } from '../config/types.ts';
import type { SecretVerifier } from '../config/secret-rotation.ts';
import { gauge } from '../metrics/families.ts';
import {
  databaseRoleOf,
  describePrivileges,
  inspectPrivileges,
  isPrivileged,
  type PrivilegeReport,
} from './database-privileges.ts';
import { StartupError } from './startup-failure.ts';

/**
 * Refuses the start when a grant is missing, or (ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE) when the
 * login is a superuser, the schema owner or holds privileges beyond its role's; otherwise warns about
 * the latter and exports it.
 */
export async function checkDatabasePrivileges(
  config: Config,
  pool: pg.Pool,
  log: Logger,
): Promise<PrivilegeReport | undefined> {
  const role = databaseRoleOf(config.role);
  if (!role) return undefined;
  const report = await inspectPrivileges(pool, role);
  const line = describePrivileges(report);
  if (report.missing.length) throw new StartupError(line);
  const privileged = isPrivileged(report);
  if (privileged && config.databaseRequireLeastPrivilege)
    throw new StartupError(`${line}; refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set`);
  const fields = {
    code: privileged ? 'database_login_privileged' : 'database_login',
    login: report.login,
    databaseRole: report.needs,
    superuser: report.superuser,
    schemaOwner: report.schemaOwner,
    excess: report.excess.length,
  };
  if (privileged) log.warn(fields, line);
  else log.info(fields, line);
  return report;
}

/** `arkvory_database_login_privileged`: what the start-time check found. */
export function registerPrivilegeMetrics(registry: Registry, report: PrivilegeReport): void {
  gauge(registry, 'arkvory_database_login_privileged', function () {
    this.set({ reason: 'superuser' }, report.superuser ? 1 : 0);
    this.set({ reason: 'schema_owner' }, report.schemaOwner ? 1 : 0);
    this.set({ reason: 'excess_grants' }, report.excess.length > 0 ? 1 : 0);
  });
}

/**
 * Checks a rotated database URL or password before the pool uses it: one connection of its own
 * logs in and, for a role with grants, finds none missing (a URL file may name another login),
 * and under ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE no more than its role needs, as at start: a
 * rotation must not let in a login the start refuses.
 */
export function databaseLoginVerifier(): SecretVerifier {
  return {
    what: 'PostgreSQL',
    variables: ['ARKVORY_DATABASE_URL', 'ARKVORY_DATABASE_PASSWORD'],
    changed: (current, next) => current.databaseUrl !== next.databaseUrl,
    async verify(next) {
      const client = new PgClient({
        connectionString: next.databaseUrl,
        application_name: `arkvory-${next.role}-rotation`,
        connectionTimeoutMillis: 10_000,
      });
      client.on('error', () => {});
      try {
        await client.connect();
        const role = databaseRoleOf(next.role);
        const report = role ? await inspectPrivileges(client, role) : undefined;
        if (report?.missing.length) throw new Error(describePrivileges(report));
        if (report && isPrivileged(report) && next.databaseRequireLeastPrivilege)
          throw new Error(
            `${describePrivileges(report)}; refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set`,
          );
        if (!role) await client.query('SELECT 1');
      } finally {
        await client.end().catch(() => {});
      }
    },
  };
}
