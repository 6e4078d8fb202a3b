import { PolicyError } from '../../policy/errors.ts';
import { GatewayError } from '../server/errors.ts';
import { parseArtifactStatsQuery, parsePrincipalStatsQuery, STATS_MAX_LIMIT } from '../stats/stats-query.ts';
import { mostDownloaded, notDownloadedFor, principalDays } from '../stats/usage-store.ts';
import { openCliPool } from './cli-database.ts';
import { type Command, defineCommand, form, UsageError } from './command.ts';

/** The checked query, or a usage error naming the option. */
function checked<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof GatewayError || err instanceof PolicyError) throw new UsageError(err.message);
    throw err;
  }
}

async function printLines(
  env: NodeJS.ProcessEnv,
  read: (pool: Awaited<ReturnType<typeof openCliPool>>) => Promise<unknown[]>,
) {
  const pool = await openCliPool(env);
  try {
    const rows = await read(pool);
    if (rows.length) process.stdout.write(`${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
    return 0;
  } finally {
    await pool.end();
  }
}

const LIMIT = {
  type: 'string',
  value: 'N',
  description: `at most N lines, 1 to ${STATS_MAX_LIMIT} (default 100)`,
} as const;

export const statsCommand: Command = defineCommand({
  name: 'stats',
  summary:
    'usage statistics: most downloaded artifacts, artifacts not downloaded for N days, use per principal and day',
  description: `Sums over every gateway as of their last flush (ARKVORY_USAGE_STATS_FLUSH_SECONDS); one JSON object per
line. artifacts: the most downloaded first (downloads, bytes, lastDownloadedAt, lastDownloader), or with
--idle-days N the published artifacts nobody downloaded for N days (never, or last before then), oldest
publication first: candidates for deletion. principals: requests, bytesDown and bytesUp per principal and
UTC day, newest day first; --since inclusive, --until exclusive (YYYY-MM-DD). The database is
ARKVORY_DATABASE_URL, or the embedded one of a running \`npm start\` on the same ARKVORY_DATA_DIR.`,
  forms: [
    form({
      name: 'artifacts',
      options: {
        'idle-days': {
          type: 'string',
          value: 'N',
          description: 'published artifacts not downloaded for N days instead',
        },
        repository: { type: 'string', value: 'REPO', description: 'only this repository' },
        limit: LIMIT,
      },
      run(input, env) {
        const idle = input.string('idle-days');
        const query = checked(() =>
          parseArtifactStatsQuery({
            view: idle === undefined ? 'top' : 'idle',
            days: idle,
            repository: input.string('repository'),
            limit: input.string('limit'),
          }),
        );
        return printLines(
          env,
          async (pool) =>
            (query.view === 'top' ? await mostDownloaded(pool, query) : await notDownloadedFor(pool, query)).items,
        );
      },
    }),
    form({
      name: 'principals',
      options: {
        principal: { type: 'string', value: 'ID|NAME', description: 'only this principal' },
        since: { type: 'string', value: 'DAY', description: 'from this day on (YYYY-MM-DD)' },
        until: { type: 'string', value: 'DAY', description: 'before this day (YYYY-MM-DD)' },
        limit: LIMIT,
      },
      run(input, env) {
        const query = checked(() =>
          parsePrincipalStatsQuery({
            principal: input.string('principal'),
            since: input.string('since'),
            until: input.string('until'),
            limit: input.string('limit'),
          }),
        );
        return printLines(env, async (pool) => (await principalDays(pool, query)).items);
      },
    }),
  ],
});
