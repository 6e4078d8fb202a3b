import { quoted } from '../../lib/quoted.ts';
import { PAGE_OPTIONS, pageInput } from './page-options.ts';
import { CURSORS } from '../../policy/auth/page.ts';
import { parseSize } from './client-commands.ts';
import { noSuchPrincipal } from '../../policy/auth/admin-store.ts';
import { quotaBody } from '../admin/quota-admin-routes.ts';
import type { QuotaScope } from '../../policy/quota/quota-check.ts';
import { createStorageQuotas, type QuotaUsage, type StorageQuotas } from '../../policy/quota/storage-quotas.ts';
import { openCliPool } from './cli-database.ts';
import { type CliAction, recordCliAction } from './cli-audit.ts';
import { GatewayError } from '../server/errors.ts';
import { defineCommand, form, type Input, UsageError, type Command } from './command.ts';

const SUBJECT_OPTIONS = {
  repository: { type: 'string', value: 'REPO', description: 'the repository (by name)' },
  principal: { type: 'string', value: 'NAME|ID', description: 'the principal (by name or id)' },
} as const;

/** The one subject `--repository` or `--principal` names. */
function scopeOf(input: Pick<Input<typeof SUBJECT_OPTIONS>, 'string'>): { scope: QuotaScope; named: string } {
  const repository = input.string('repository');
  const principal = input.string('principal');
  if ((repository === undefined) === (principal === undefined))
    throw new UsageError('give either --repository or --principal');
  return repository !== undefined
    ? { scope: 'repository', named: repository }
    : { scope: 'principal', named: principal! };
}

/** What a quota form prints (JSON on stdout) and, for a change, records after printing it. */
interface Outcome {
  readonly out: unknown;
  readonly audit?: CliAction;
}

async function withQuotas(env: NodeJS.ProcessEnv, work: (quotas: StorageQuotas) => Promise<Outcome>): Promise<number> {
  const pool = await openCliPool(env);
  try {
    const { out, audit } = await work(createStorageQuotas(pool));
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    // The change is made and printed: a failed record is reported on its own (cli-failure.ts).
    if (audit) await recordCliAction(pool, audit);
    return 0;
  } finally {
    await pool.end();
  }
}

/** The subject's key: the repository's name, the principal's id; a refusal when there is none. */
async function subject(quotas: StorageQuotas, scope: QuotaScope, named: string): Promise<string> {
  const found = await quotas.subjectOf(scope, named);
  if (found !== undefined) return found;
  throw scope === 'repository'
    ? new GatewayError('invalid_request', `${quoted(named)} is not a repository name`)
    : noSuchPrincipal(named);
}

/** The subject's usage; `not_found` for a repository that does not exist (a typo), as `set` refuses it. */
async function usage(quotas: StorageQuotas, scope: QuotaScope, id: string, named: string): Promise<QuotaUsage> {
  const shown = await quotas.show(scope, id);
  if (shown === undefined) throw new GatewayError('not_found', `no ${scope} ${named}`);
  return shown;
}

export const quotaCommand: Command = defineCommand({
  name: 'quota',
  summary: 'storage quotas per repository and per principal: list, show usage, set, unset',
  description: `A repository's usage counts each blob once however many of its names reference it; a principal's,
each blob it published once per repository. Uploads in progress hold reservations, which count too. An upload
that would exceed a quota is refused with 507 quota_exceeded: before its body when a quota applies as it starts
(a chunked one as it crosses the quota), else once its bytes are in, before they are published
(docs/storage-quotas.md).
--bytes takes a byte count or a size with a binary unit (512K, 500M, 20G, 20GiB); 0 allows nothing more.
Output is JSON on stdout. Works through the database (ARKVORY_DATABASE_URL, or the embedded one on the same
ARKVORY_DATA_DIR), as /api/v1/admin/quotas does on the writer.`,
  forms: [
    form({
      name: 'list',
      summary: 'the quotas set, with their usage: one page ({ quotas, nextCursor })',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.quotas);
        return withQuotas(env, async (q) => {
          const listed = await q.listPage(page);
          return { out: { quotas: listed.items.map(quotaBody), nextCursor: listed.nextCursor } };
        });
      },
    }),
    form({
      name: 'show',
      summary: 'one subject: its usage, and its quota if set',
      options: SUBJECT_OPTIONS,
      run: (input, env) => {
        const { scope, named } = scopeOf(input);
        return withQuotas(env, async (q) => ({
          out: quotaBody(await usage(q, scope, await subject(q, scope, named), named)),
        }));
      },
    }),
    form({
      name: 'set',
      summary: 'set the limit',
      options: {
        ...SUBJECT_OPTIONS,
        bytes: { type: 'string', value: 'SIZE', description: 'the limit: bytes, or with a unit (500M, 20G)' },
      },
      run: (input, env) => {
        const { scope, named } = scopeOf(input);
        const raw = input.string('bytes');
        if (raw === undefined) throw new UsageError('give --bytes');
        // 0 is a quota too (nothing more may be stored), however it is written (0, 00, 0K).
        const limitBytes = parseSize(raw, { zero: true });
        return withQuotas(env, async (q) => {
          const id = await subject(q, scope, named);
          if (!(await q.set(scope, id, limitBytes))) throw new GatewayError('not_found', `no ${scope} ${named}`);
          return {
            out: quotaBody(await usage(q, scope, id, named)),
            audit: { action: 'quota.set', target: { scope, subject: id }, details: { limitBytes } },
          };
        });
      },
    }),
    form({
      name: 'unset',
      summary: 'remove the quota (no limit)',
      options: SUBJECT_OPTIONS,
      run: (input, env) => {
        const { scope, named } = scopeOf(input);
        return withQuotas(env, async (q) => {
          const id = await subject(q, scope, named);
          if (!(await q.remove(scope, id)))
            throw new GatewayError('not_found', `no ${scope} quota is set for ${named}`);
          return {
            out: { removed: { scope, subject: id } },
            audit: { action: 'quota.remove', target: { scope, subject: id } },
          };
        });
      },
    }),
  ],
});
