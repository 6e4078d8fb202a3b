import { readFile } from 'node:fs/promises';
import { UsageError, parseArgs, type Command } from './command.ts';

const USAGE = `Usage:
  arkvory rules-service serve                          run the reference rules service (Phase 3)
  arkvory rules-service set LIMITER KIND SUBJECT FILE  put the override of one principal or repository
  arkvory rules-service unset LIMITER KIND SUBJECT     delete one override
  arkvory rules-service list [--limiter LIMITER]       list overrides (JSON)
Options: --service NAME  the calling service the override is for (default ARKVORY_SERVICE_NAME, "arkvory")

KIND is principal (SUBJECT = principal id) or repository (SUBJECT = repository name). FILE is YAML or
JSON: a list of rules, or { rules: [...] }, in the schema of ARKVORY_RATE_LIMITS_FILE, using only the
limiter's available properties. Gateways with ARKVORY_RULES_SERVICE_URL evaluate these rules before
their local tiers; a change reaches them within ARKVORY_RULES_SERVICE_TTL_SECONDS (at most
ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS) plus the query timeout. \`serve\` listens on ARKVORY_HOST and
ARKVORY_PORT, needs ARKVORY_DATABASE_URL (migrated), guards the query route with
ARKVORY_RULES_SERVICE_TOKEN when set, and takes admin keys on /api/v1/admin/rule-overrides.
Exit codes: 0 ok, 1 invalid rules or no such override, 2 usage.`;

export const rulesServiceCommand: Command = {
  name: 'rules-service',
  summary: 'run the reference rate-limit rules service; set, unset and list its overrides',
  usage: USAGE,
  async run(args, env) {
    const [sub, ...rest] = args;
    const { flags, positionals } = parseArgs(rest);
    for (const name of flags.keys())
      if (name !== 'service' && name !== 'limiter') throw new UsageError(`unknown option --${name}`);
    const { loadConfigOrExit } = await import('../server/serve.ts');
    if (sub === 'serve') {
      if (positionals.length) throw new UsageError('serve takes no arguments');
      const config = loadConfigOrExit({ ...env, ARKVORY_ROLE: 'rules-service' });
      const { createLogger } = await import('../server/logger.ts');
      const { runRulesService } = await import('../rules-service/rules-service.ts');
      return runRulesService(config, createLogger(config.logLevel));
    }
    if (sub !== 'set' && sub !== 'unset' && sub !== 'list') throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    const config = loadConfigOrExit(env);
    const service = typeof flags.get('service') === 'string' ? (flags.get('service') as string) : config.serviceName;
    const { validateOverride, createOverrideStore } = await import('../../policy/rate-limit/rule-overrides.ts');
    const { formatProblem } = await import('../../policy/rate-limit/index.ts');
    const { loadRuleFiles } = await import('../gates/rate-limit-rule-files.ts');
    const { available } = await loadRuleFiles(undefined);
    const fail = (lines: string[]) => {
      for (const line of lines) process.stderr.write(`arkvory rules-service ${sub}: ${line}\n`);
      return 1;
    };
    let input: Parameters<typeof validateOverride>[0] | undefined;
    if (sub === 'set' || sub === 'unset') {
      const [limiter, subjectKind, subject, file] = positionals;
      if (!limiter || !subjectKind || !subject || (sub === 'set' && !file))
        throw new UsageError(`${sub} needs LIMITER KIND SUBJECT${sub === 'set' ? ' FILE' : ''}`);
      input = { service, limiter, subjectKind, subject };
      if (sub === 'set') {
        let text: string;
        try {
          text = await readFile(file!, 'utf8');
        } catch (err) {
          return fail([`${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`]);
        }
        const { parse } = await import('yaml');
        try {
          input.rules = parse(text) as unknown;
        } catch (err) {
          return fail([`${file}: not YAML/JSON (${(err as Error).message.split('\n')[0]})`]);
        }
      }
    }
    const checked = input ? validateOverride(input, available) : undefined;
    if (checked && !checked.override) return fail(checked.problems.map(formatProblem));
    const { openCliPool } = await import('./cli-database.ts');
    const pool = await openCliPool(env);
    try {
      const store = createOverrideStore(pool);
      if (sub === 'set') {
        const saved = await store.put(checked!.override!);
        process.stdout.write(`${JSON.stringify({ override: saved })}\n`);
      } else if (sub === 'unset') {
        if (!(await store.remove(checked!.override!))) return fail(['no such override']);
        process.stdout.write(
          `${JSON.stringify({ removed: { service, limiter: checked!.override!.limiter, subject_kind: checked!.override!.subjectKind, subject: checked!.override!.subject } })}\n`,
        );
      } else {
        const limiter = flags.get('limiter');
        const overrides = await store.list({ service, ...(typeof limiter === 'string' ? { limiter } : {}) });
        process.stdout.write(`${JSON.stringify({ overrides }, null, 2)}\n`);
      }
      return 0;
    } finally {
      await pool.end();
    }
  },
};
