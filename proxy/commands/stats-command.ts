import { CURSORS, type CursorShape, type Page } from '../../policy/auth/page.ts';
import { PolicyError } from '../../policy/errors.ts';
import { GatewayError } from '../server/errors.ts';
import { parseArtifactStatsQuery, parsePrincipalStatsQuery, STATS_MAX_LIMIT } from '../stats/stats-query.ts';
import { decodeStatsCursor, mostDownloaded, notDownloadedFor, principalDays } from '../stats/usage-store.ts';
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

/**
 * Prints one page as JSON lines, or with `--all` every page after it; when more remain, the
 * `--cursor` of the next page goes to stderr, as `arkvory audit list` does. It printed the first
 * page alone and dropped its cursor: nothing said more rows existed, and none past 1000 could be read.
 */
async function printPages(
  env: NodeJS.ProcessEnv,
  all: boolean,
  cursor: string | undefined,
  read: (pool: Awaited<ReturnType<typeof openCliPool>>, cursor: string | undefined) => Promise<Page<unknown>>,
) {
  const pool = await openCliPool(env);
  try {
    for (let after = cursor; ; ) {
      const page = await read(pool, after);
      if (page.items.length) process.stdout.write(`${page.items.map((r) => JSON.stringify(r)).join('\n')}\n`);
      if (page.nextCursor === null) return 0;
      if (!all) {
        process.stderr.write(`more: --cursor ${page.nextCursor}\n`);
        return 0;
      }
      after = page.nextCursor;
    }
  } finally {
    await pool.end();
  }
}

/** `--cursor`, checked before anything is opened: one that is not this listing's is a usage error (exit 2). */
function cursorOption(raw: string | undefined, listing: CursorShape): string | undefined {
  try {
    decodeStatsCursor(raw, listing);
  } catch (err) {
    if (err instanceof PolicyError) throw new UsageError(`--${err.message}`);
    throw err;
  }
  return raw;
}

const LIMIT = {
  type: 'string',
  value: 'N',
  description: `at most N lines a page, 1 to ${STATS_MAX_LIMIT} (default 100)`,
} as const;

const PAGING = {
  limit: LIMIT,
  cursor: { type: 'string', value: 'CURSOR', description: 'the page after the one whose "more: --cursor" this is' },
  all: { type: 'boolean', description: 'every row, page after page' },
} as const;

export const statsCommand: Command = defineCommand({
  name: 'stats',
  summary:
    'usage statistics: most downloaded artifacts, artifacts not downloaded for N days, use per principal and day',
  description: `Sums over every gateway as of their last flush (ARKVORY_USAGE_STATS_FLUSH_SECONDS); one JSON object per
line. artifacts: the most downloaded first (downloads, bytes, lastDownloadedAt, lastDownloader), or with
--idle-days N the published artifacts nobody downloaded for N days (never, or last before then), oldest
publication first: candidates for deletion. principals: requests, bytesDown and bytesUp per principal and
UTC day, newest day first; --since inclusive, --until exclusive (YYYY-MM-DD). Without --all it prints
one page (--limit); when more remain, the --cursor for the next page goes to stderr. The database is
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
        ...PAGING,
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
        const cursor = cursorOption(
          input.string('cursor'),
          query.view === 'top' ? CURSORS.statsTop : CURSORS.statsIdle,
        );
        return printPages(env, input.boolean('all'), cursor, (pool, after) =>
          query.view === 'top'
            ? mostDownloaded(pool, { ...query, cursor: after })
            : notDownloadedFor(pool, { ...query, cursor: after }),
        );
      },
    }),
    form({
      name: 'principals',
      options: {
        principal: { type: 'string', value: 'ID|NAME', description: 'only this principal' },
        since: { type: 'string', value: 'DAY', description: 'from this day on (YYYY-MM-DD)' },
        until: { type: 'string', value: 'DAY', description: 'before this day (YYYY-MM-DD)' },
        ...PAGING,
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
        const cursor = cursorOption(input.string('cursor'), CURSORS.statsPrincipals);
        return printPages(env, input.boolean('all'), cursor, (pool, after) =>
          principalDays(pool, { ...query, cursor: after }),
        );
      },
    }),
  ],
});
