/** The start-time privilege check of a gateway role (database-privileges.ts), its log line and metric. */
import type pg from 'pg';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Config } from '../config/types.ts';
import { gauge } from '../metrics/families.ts';
import { databaseRoleOf, describePrivileges, inspectPrivileges, type PrivilegeReport } from './database-privileges.ts';
import { StartupError } from './startup-failure.ts';

/**
 * Refuses the start when a grant is missing, or (ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE) when the
 * login is a superuser or the schema owner; otherwise warns about the latter and exports it.
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
  const privileged = report.superuser || report.schemaOwner;
  if (privileged && config.databaseRequireLeastPrivilege)
    throw new StartupError(`${line}; refused because ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE is set`);
  const fields = {
    code: privileged ? 'database_login_privileged' : 'database_login',
    login: report.login,
    databaseRole: report.needs,
    superuser: report.superuser,
    schemaOwner: report.schemaOwner,
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
  });
}
