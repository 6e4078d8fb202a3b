import { parseAuditFilter } from '../audit/audit-event.ts';
import { listAudit } from '../audit/audit-log.ts';
import { PolicyError } from '../../policy/errors.ts';
import { GatewayError } from '../server/errors.ts';
import { openCliPool } from './cli-database.ts';
import { defineCommand, form, type Command, UsageError } from './command.ts';
import { PAGE_OPTIONS } from './page-options.ts';

export const auditCommand: Command = defineCommand({
  name: 'audit',
  summary: 'read the audit trail: who changed what, when and from where (JSON lines)',
  description: `list prints the recorded actions newest first, one JSON object per line: id, at, action, actor
({kind: principal, principalId, principalName}, {kind: operator, operator, host}, or {kind: anonymous} for a
refused console sign-in with a key nobody holds), source (the client
address, or cli), requestId (the gateway's id of the request, or the CLI run's), clientRequestId (the
X-Request-Id the client sent, if any), target and details. Without --all it prints one page; when more remain, the
--cursor for the next page goes to stderr. Times are ISO 8601 (2026-01-31 or 2026-01-31T12:00:00Z; UTC without an offset);
--since is inclusive, --until exclusive. The actions are listed in docs/observability.md. The database is
ARKVORY_DATABASE_URL (a login that may read the trail: the writer's or maintenance's), or the embedded
one of a running \`npm start\` on the same ARKVORY_DATA_DIR.`,
  forms: [
    form({
      name: 'list',
      options: {
        action: {
          type: 'string',
          value: 'ACTION',
          description: 'one action (key.revoke) or every action of a noun (key)',
        },
        principal: { type: 'string', value: 'ID|NAME', description: "only this principal's actions" },
        since: { type: 'string', value: 'TIME', description: 'only actions at or after TIME' },
        until: { type: 'string', value: 'TIME', description: 'only actions before TIME' },
        all: { type: 'boolean', description: 'every matching action, page after page' },
        ...PAGE_OPTIONS,
      },
      async run(input, env) {
        let filter: ReturnType<typeof parseAuditFilter>;
        try {
          filter = parseAuditFilter({
            action: input.string('action'),
            principal: input.string('principal'),
            since: input.string('since'),
            until: input.string('until'),
            limit: input.string('limit'),
            cursor: input.string('cursor'),
          });
        } catch (err) {
          if (err instanceof GatewayError || err instanceof PolicyError) throw new UsageError(err.message);
          throw err;
        }
        const pool = await openCliPool(env);
        try {
          for (;;) {
            const page = await listAudit(pool, filter);
            if (page.items.length) process.stdout.write(`${page.items.map((e) => JSON.stringify(e)).join('\n')}\n`);
            if (page.nextCursor === null) return 0;
            const next = parseAuditFilter({ cursor: page.nextCursor, limit: String(filter.limit) });
            if (!input.boolean('all')) {
              process.stderr.write(`more: --cursor ${page.nextCursor}\n`);
              return 0;
            }
            filter = { ...filter, beforeId: next.beforeId! };
          }
        } finally {
          await pool.end();
        }
      },
    }),
  ],
});
