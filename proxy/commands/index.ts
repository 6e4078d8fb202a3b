import { auditCommand } from './audit-command.ts';
import { statsCommand } from './stats-command.ts';
import { grantsCommand, groupsCommand, keysCommand, principalsCommand, reposCommand } from './auth-commands.ts';
import { backupCommand, restoreCommand } from './backup-commands.ts';
import type { Command } from './command.ts';
import { dbCommand } from './db-command.ts';
import { doctorCommand } from './doctor-command.ts';
import { gcCommand, scrubCommand } from './maintenance-commands.ts';
import { cacheCommand } from './cache-commands.ts';
import { quotaCommand } from './quota-commands.ts';
import { migrateCommand } from './migrate-command.ts';
import { getCommand, presignCommand, putCommand } from './client-commands.ts';
import { policyCommand } from './policy-command.ts';
import { presignSecretCommand } from './presign-secret-command.ts';
import { ratelimitCommand } from './rules-command.ts';
import { rulesServiceCommand } from './rules-service-command.ts';
import { serveCommand } from './serve-command.ts';

/** Every `arkvory` subcommand, in the order `--help` lists them. */
export const COMMANDS: readonly Command[] = [
  serveCommand,
  migrateCommand,
  dbCommand,
  doctorCommand,
  principalsCommand,
  keysCommand,
  reposCommand,
  groupsCommand,
  grantsCommand,
  policyCommand,
  ratelimitCommand,
  rulesServiceCommand,
  scrubCommand,
  gcCommand,
  cacheCommand,
  quotaCommand,
  backupCommand,
  restoreCommand,
  presignSecretCommand,
  auditCommand,
  statsCommand,
  getCommand,
  putCommand,
  presignCommand,
];
