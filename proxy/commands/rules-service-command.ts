import { readFile } from 'node:fs/promises';
import type { PageRequest } from '../../policy/auth/page.ts';
import { SUBJECT_KINDS, type SubjectKind } from '../../policy/rate-limit/rule-overrides.ts';
import { defineCommand, form, UsageError, type Command } from './command.ts';
import { CURSORS } from '../../policy/auth/page.ts';
import { PAGE_OPTIONS, pageInput } from './page-options.ts';

const SERVICE = {
  service: {
    type: 'string',
    value: 'NAME',
    description: 'the calling service the override is for (default ARKVORY_SERVICE_NAME, "arkvory")',
  },
} as const;

/** KIND as the command line gives it: principal or repository, else a usage error (exit 2) before anything is read. */
function checkedKind(positionals: readonly string[]): readonly string[] {
  const kind = positionals[1];
  if (!SUBJECT_KINDS.includes(kind as SubjectKind))
    throw new UsageError(`KIND must be ${SUBJECT_KINDS.join(' or ')} (got ${kind})`);
  return positionals;
}

export const rulesServiceCommand: Command = defineCommand({
  name: 'rules-service',
  summary: 'run the reference rate-limit rules service; set, unset and list its overrides',
  description: `KIND is principal (SUBJECT = principal id) or repository (SUBJECT = repository name). FILE is YAML or
JSON: a list of rules, or { rules: [...] }, in the schema of ARKVORY_RATE_LIMITS_FILE, using only the
limiter's available properties. Gateways with ARKVORY_RULES_SERVICE_URL evaluate these rules before
their local tiers; a change reaches them within ARKVORY_RULES_SERVICE_TTL_SECONDS (at most
ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS) plus the query timeout. \`serve\` listens on ARKVORY_HOST and
ARKVORY_PORT, needs ARKVORY_DATABASE_URL (migrated; at start it retries an unreachable PostgreSQL for
up to ARKVORY_DATABASE_STARTUP_WAIT_SECONDS, then exits 1), answers 503 when a statement outlasts
ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS, guards the query route with ARKVORY_RULES_SERVICE_TOKEN
when set, and takes admin keys on /api/v1/admin/rule-overrides.
\`list\` prints one page ({ overrides, nextCursor }): pass nextCursor to --cursor for the next one.
Exit codes: 0 ok, 1 invalid rules or no such override, 2 usage (also a KIND other than principal or
repository, a --limit out of range, or a --cursor not valid or made for another listing, said before
anything is opened), 3 the change was made but its audit entry was not recorded, 4 set or unset lost
its connection while committing (store_outcome_unknown): it may or may not have landed (recorded
with outcome unknown; check with list).`,
  forms: [
    form({
      name: 'serve',
      summary: 'run the reference rules service (Phase 3)',
      async run(_input, env) {
        const { loadCliConfig } = await import('./cli-database.ts');
        const config = await loadCliConfig({ ...env, ARKVORY_ROLE: 'rules-service' });
        const { createLogger } = await import('../server/logger.ts');
        const { runRulesService } = await import('../rules-service/rules-service.ts');
        return runRulesService(config, createLogger(config.logLevel));
      },
    }),
    form({
      name: 'set',
      args: 'LIMITER KIND SUBJECT FILE',
      summary: 'put the override of one principal or repository',
      options: SERVICE,
      run: (input, env) => overrides('set', checkedKind(input.positionals), input.string('service'), undefined, env),
    }),
    form({
      name: 'unset',
      args: 'LIMITER KIND SUBJECT',
      summary: 'delete one override',
      options: SERVICE,
      run: (input, env) => overrides('unset', checkedKind(input.positionals), input.string('service'), undefined, env),
    }),
    form({
      name: 'list',
      summary: 'list overrides, one page (JSON: { overrides, nextCursor })',
      options: {
        limiter: { type: 'string', value: 'LIMITER', description: "only this limiter's overrides" },
        ...SERVICE,
        ...PAGE_OPTIONS,
      },
      run: (input, env) => {
        const page = pageInput(input, CURSORS.ruleOverrides);
        return overrides('list', [], input.string('service'), input.string('limiter'), env, page);
      },
    }),
  ],
});

/** set, unset or list overrides in the database (the rules service's store). */
async function overrides(
  sub: 'set' | 'unset' | 'list',
  positionals: readonly string[],
  serviceOption: string | undefined,
  limiterOption: string | undefined,
  env: NodeJS.ProcessEnv,
  page: PageRequest = {},
): Promise<number> {
  const { loadCliConfig } = await import('./cli-database.ts');
  const config = await loadCliConfig(env);
  const service = serviceOption ?? config.serviceName;
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
    const [limiter, subjectKind, subject, file] = positionals as [string, string, string, string?];
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
  const { changeOrUnknownOutcome, recordCliAction } = await import('./cli-audit.ts');
  const { overrideDetails } = await import('../audit/admin-details.ts');
  try {
    const store = createOverrideStore(pool);
    if (sub === 'set' || sub === 'unset') {
      const override = checked!.override!;
      const target = { service, limiter: override.limiter, kind: override.subjectKind, subject: override.subject };
      const audit =
        sub === 'set'
          ? { action: 'rule_override.set' as const, target, details: overrideDetails(override.rules) }
          : { action: 'rule_override.remove' as const, target };
      return await changeOrUnknownOutcome(
        `rules-service ${sub}`,
        'arkvory rules-service list',
        pool,
        audit,
        async () => {
          if (sub === 'set') {
            const saved = await store.put(override);
            process.stdout.write(`${JSON.stringify({ override: saved })}\n`);
          } else {
            if (!(await store.remove(override))) return fail(['no such override']);
            process.stdout.write(
              `${JSON.stringify({ removed: { service, limiter: override.limiter, subject_kind: override.subjectKind, subject: override.subject } })}\n`,
            );
          }
          await recordCliAction(pool, audit);
          return 0;
        },
      );
    } else {
      const { PolicyError } = await import('../../policy/errors.ts');
      try {
        const listed = await store.list(
          { service, ...(limiterOption !== undefined ? { limiter: limiterOption } : {}) },
          page,
        );
        process.stdout.write(
          `${JSON.stringify({ overrides: listed.items, nextCursor: listed.nextCursor }, null, 2)}\n`,
        );
      } catch (err) {
        if (err instanceof PolicyError) return fail([err.message]);
        throw err;
      }
    }
    return 0;
  } finally {
    await pool.end();
  }
}
