import type { Command } from './command.ts';

/**
 * Each command's module, by the command's name: a run loads its own command alone. The table of
 * every command (index.ts, which `--help` lists) imports all their modules, about twice what one
 * command needs, where a CLI run's start is nearly all module loading; and a gateway (`serve`) would
 * keep the other commands' modules (database clients, stores, backup) in its heap for nothing.
 */
export const COMMAND_MODULES: Readonly<Record<string, () => Promise<Command>>> = {
  serve: async () => (await import('./serve-command.ts')).serveCommand,
  migrate: async () => (await import('./migrate-command.ts')).migrateCommand,
  db: async () => (await import('./db-command.ts')).dbCommand,
  doctor: async () => (await import('./doctor-command.ts')).doctorCommand,
  principals: async () => (await import('./auth-commands.ts')).principalsCommand,
  keys: async () => (await import('./auth-commands.ts')).keysCommand,
  repos: async () => (await import('./auth-commands.ts')).reposCommand,
  groups: async () => (await import('./auth-commands.ts')).groupsCommand,
  grants: async () => (await import('./auth-commands.ts')).grantsCommand,
  policy: async () => (await import('./policy-command.ts')).policyCommand,
  ratelimit: async () => (await import('./rules-command.ts')).ratelimitCommand,
  'rules-service': async () => (await import('./rules-service-command.ts')).rulesServiceCommand,
  scrub: async () => (await import('./maintenance-commands.ts')).scrubCommand,
  gc: async () => (await import('./maintenance-commands.ts')).gcCommand,
  cache: async () => (await import('./cache-commands.ts')).cacheCommand,
  quota: async () => (await import('./quota-commands.ts')).quotaCommand,
  backup: async () => (await import('./backup-commands.ts')).backupCommand,
  restore: async () => (await import('./backup-commands.ts')).restoreCommand,
  'presign-secret': async () => (await import('./presign-secret-command.ts')).presignSecretCommand,
  audit: async () => (await import('./audit-command.ts')).auditCommand,
  stats: async () => (await import('./stats-command.ts')).statsCommand,
  get: async () => (await import('./client-commands.ts')).getCommand,
  put: async () => (await import('./client-commands.ts')).putCommand,
  presign: async () => (await import('./client-commands.ts')).presignCommand,
};

/** The command named `name`, its module alone loaded; undefined for a name no command has. */
export function loadCommand(name: string): Promise<Command> | undefined {
  return Object.hasOwn(COMMAND_MODULES, name) ? COMMAND_MODULES[name]!() : undefined;
}
