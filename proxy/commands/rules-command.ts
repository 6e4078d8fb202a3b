import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { publishedRuleNames } from '../audit/admin-details.ts';
import { changeOrUnknownOutcome, recordCliAction } from './cli-audit.ts';
import type pg from 'pg';
import type { RateLimitRedis } from '../gates/rate-limit-redis.ts';
import type { RuleRegistry } from '../../policy/rate-limit/index.ts';
import { defineCommand, form, type Command, type Input, type OptionSpec, type OptionSpecs } from './command.ts';
import { CURSORS } from '../../policy/auth/page.ts';
import { PAGE_OPTIONS, pageInput } from './page-options.ts';

// The engine, ioredis and yaml load only when this command runs, so other commands start as fast as before.
const engine = () => import('../../policy/rate-limit/index.ts');
const ruleFiles = () => import('../gates/rate-limit-rule-files.ts');

/**
 * The rule store the gateways use: Redis when ARKVORY_REDIS_URL is set, else the database. A change
 * (`audited`) also needs the database with Redis: the audit trail is there (opened before anything changes).
 */
async function openRegistry(
  env: NodeJS.ProcessEnv,
  audited = false,
): Promise<{ registry: RuleRegistry; pool: pg.Pool | undefined; close(): Promise<void> }> {
  const { createPgRuleDocuments, createRedisRuleDocuments, createRuleRegistry, ruleDocumentsPrefix } = await engine();
  const { loadRuleFiles } = await ruleFiles();
  const { createRateLimitRedis } = await import('../gates/rate-limit-redis.ts');
  const { createLogger } = await import('../server/logger.ts');
  const { pino } = await import('pino');
  const { systemClock } = await import('../../policy/clock.ts');
  const { loadCliConfig, openCliPool } = await import('./cli-database.ts');
  const config = await loadCliConfig(env);
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  const { available, fileRules, fileStatus, fileProblems } = await loadRuleFiles(config.rateLimitsFile);
  // The CLI writes to the shared store: an operator file it cannot apply is an error here, not a warning.
  if (fileStatus === 'invalid') {
    const { RateLimitConfigError } = await ruleFiles();
    throw new RateLimitConfigError(fileProblems);
  }
  let redis: RateLimitRedis | undefined;
  let pool: pg.Pool | undefined;
  if (!config.redisUrl || audited) pool = await openCliPool(env);
  if (config.redisUrl) {
    redis = createRateLimitRedis(config.redisUrl, log, systemClock);
    try {
      await redis.connect();
    } catch (err) {
      redis.disconnect();
      await pool?.end();
      const { GatewayError } = await import('../server/errors.ts');
      const { redactRedisTarget } = await import('../../policy/rate-limit/redis-target.ts');
      throw new GatewayError(
        'redis_unreachable',
        `Redis at ${redactRedisTarget(config.redisUrl)} did not answer: ${(err as Error).message}`,
      );
    }
  }
  const documents = redis
    ? createRedisRuleDocuments(redis, ruleDocumentsPrefix(config.redisKeyPrefix, redis.isCluster))
    : createPgRuleDocuments(pool!);
  const registry = createRuleRegistry({ documents, available, fileRules, clock: systemClock, log, timeoutMs: 10_000 });
  return {
    registry,
    pool,
    async close() {
      if (redis) await redis.quit().catch(() => redis.disconnect());
      if (pool) await pool.end();
    },
  };
}

async function readRulesFile(file: string) {
  const { parseRateLimits } = await engine();
  const { loadRuleFiles, RateLimitConfigError } = await ruleFiles();
  const { available } = await loadRuleFiles(undefined);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new RateLimitConfigError([
      `${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
    ]);
  }
  return parseRateLimits(text, file, available);
}

/** A ratelimit subcommand: invalid rules and unknown limiters or rules are exit 1 with one line each. */
function ratelimitForm<const O extends OptionSpecs = Record<never, OptionSpec>>(
  name: string,
  args: string | undefined,
  summary: string,
  body: (positionals: readonly string[], env: NodeJS.ProcessEnv, input: Input<O>) => Promise<number>,
  options?: O,
) {
  return form<O>({
    name,
    ...(args ? { args } : {}),
    ...(options ? { options } : {}),
    summary,
    async run(input: Input<O>, env) {
      const { formatProblem, RateLimitError } = await engine();
      const { RateLimitConfigError } = await ruleFiles();
      const { PolicyError } = await import('../../policy/errors.ts');
      try {
        return await body(input.positionals, env, input);
      } catch (err) {
        if (err instanceof PolicyError) {
          process.stderr.write(`arkvory ratelimit ${name}: ${err.message}\n`);
          return 1;
        }
        if (err instanceof RateLimitConfigError) {
          for (const line of err.lines) process.stderr.write(`${line}\n`);
          return 1;
        }
        if (err instanceof RateLimitError) {
          for (const line of err.problems.length ? err.problems.map(formatProblem) : [err.message])
            process.stderr.write(`arkvory ratelimit ${name}: ${line}\n`);
          return 1;
        }
        throw err;
      }
    },
  });
}

/** Reads and checks FILE; its problems go to stderr. */
async function checkedRules(file: string) {
  const { formatProblem } = await engine();
  const checked = await readRulesFile(file);
  for (const p of checked.problems) process.stderr.write(`${formatProblem(p)}\n`);
  return checked;
}

export const ratelimitCommand: Command = defineCommand({
  name: 'ratelimit',
  summary: 'validate rate-limit rule files; publish, unpublish and show the rules the gateways use',
  description: `FILE has the format of ARKVORY_RATE_LIMITS_FILE: rate_limits: { <limiter>: [rules] }. Limiters not
in FILE are left as they are; rules are added or replaced by name. The rule store is Redis when
ARKVORY_REDIS_URL is set, else the database (ARKVORY_DATABASE_URL, or the embedded one of a running
gateway). Running gateways pick changes up within their refresh interval (5 s). show prints one page
of limiters ({ limiters, nextCursor }): pass nextCursor to --cursor for the next one.
Exit codes: 0 ok, 1 invalid rules or unknown limiter/rule, 2 usage, 3 the change was made but its
audit entry was not recorded, 4 the store lost its connection while committing the change
(store_outcome_unknown): it may or may not have landed (recorded with outcome unknown; check with show).`,
  forms: [
    ratelimitForm('validate', 'FILE', 'check a rate_limits.yaml; exit 1 and one line per violation', async ([file]) => {
      const { rateLimits, problems } = await checkedRules(file!);
      if (problems.length) return 1;
      const rules = [...rateLimits.values()].reduce((n, r) => n + r.length, 0);
      process.stdout.write(`${file}: ok (${rules} rule(s) for ${rateLimits.size} limiter(s))\n`);
      return 0;
    }),
    ratelimitForm(
      'publish',
      'FILE',
      'publish its rules (published tier), all limiters at once',
      async ([file], env) => {
        const { rateLimits, problems } = await checkedRules(file!);
        if (problems.length) return 1;
        const store = await openRegistry(env, true);
        try {
          const batch = { rate_limits: Object.fromEntries(rateLimits) };
          const target = { file: path.resolve(file!) };
          const names = publishedRuleNames(batch);
          return await changeOrUnknownOutcome(
            'ratelimit publish',
            'arkvory ratelimit show',
            store.pool!,
            { action: 'rate_limit.publish', target, details: { names } },
            async () => {
              const result = await store.registry.publish(batch);
              process.stdout.write(`${JSON.stringify({ published: result })}\n`);
              await recordCliAction(store.pool!, {
                action: 'rate_limit.publish',
                target,
                details: { ...result, names },
              });
              return 0;
            },
          );
        } finally {
          await store.close();
        }
      },
    ),
    ratelimitForm('unpublish', 'LIMITER RULE', 'delete one published rule', async ([limiter, rule], env) => {
      const store = await openRegistry(env, true);
      try {
        const target = { limiter, rule };
        return await changeOrUnknownOutcome(
          'ratelimit unpublish',
          'arkvory ratelimit show',
          store.pool!,
          { action: 'rate_limit.unpublish', target },
          async () => {
            await store.registry.unpublish(limiter!, rule!);
            process.stdout.write(`${JSON.stringify({ unpublished: target })}\n`);
            await recordCliAction(store.pool!, { action: 'rate_limit.unpublish', target });
            return 0;
          },
        );
      } finally {
        await store.close();
      }
    }),
    ratelimitForm(
      'show',
      '[LIMITER]',
      'effective rules, tier by tier (file > published > default); one page of limiters',
      async ([limiter], env, input) => {
        // Before Redis or the database is opened: a --limit out of range is a usage error.
        const request = pageInput(input, CURSORS.limiters);
        const store = await openRegistry(env);
        try {
          const page =
            limiter === undefined
              ? await store.registry.showPage(request)
              : { items: await store.registry.show(limiter), nextCursor: null };
          process.stdout.write(`${JSON.stringify({ limiters: page.items, nextCursor: page.nextCursor }, null, 2)}\n`);
          return 0;
        } finally {
          await store.close();
        }
      },
      PAGE_OPTIONS,
    ),
  ],
});
