/**
 * Routes of the reference rules service (`arkvory rules-service serve`, Phase 3). Documented in
 * proxy/openapi/rules-service.yaml (a document of its own: the gateway's openapi.yaml covers the
 * gateway's routes only).
 *  - `POST /api/v1/rules/query`: the gateways' query; open, or guarded by ARKVORY_RULES_SERVICE_TOKEN.
 *  - `/api/v1/admin/rule-overrides…` (admin scope, the gateway's admin keys): list (cursor-paged), put, delete.
 */
import { formatProblem, validateRulesQuery, type AvailableLimiters } from '../../policy/rate-limit/index.ts';
import {
  answerFor,
  overrideBypasses,
  storedOverrideRules,
  type SubjectKind,
  validateOverride,
  type OverrideStore,
} from '../../policy/rate-limit/rule-overrides.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Lifecycle } from '../server/lifecycle.ts';
import type { Route } from '../server/route-types.ts';
import { sendJson } from '../server/http-errors.ts';
import { liveAndStatusRoutes } from '../server/health-routes.ts';
import { auditUnknownOutcome, mayPublishBypass, toPolicyError } from '../admin/rate-limit-admin-routes.ts';
import { pageQuery } from '../admin/auth-admin-routes.ts';
import { readJsonBody } from '../server/request-body.ts';
import type { Clock } from '../../policy/clock.ts';
import type { QueryTokens } from './query-tokens.ts';
import type { RuleSpec } from '../../policy/rate-limit/rules.ts';
import { LogBudget } from '../../lib/log-budget.ts';
import { overrideDetails } from '../audit/admin-details.ts';

const OVERRIDES = '/api/v1/admin/rule-overrides';
const ONE_OVERRIDE = `${OVERRIDES}/:service/:limiter/:kind/:subject`;

function invalid(problems: Parameters<typeof formatProblem>[0][]): PolicyError {
  return new PolicyError('invalid_request', problems.map(formatProblem).join('; '));
}

/**
 * A failed override write, as the admin API's rule writes answer: 503 `unavailable` when nothing was
 * written, 503 `rules_outcome_unknown` when the connection was lost while its COMMIT was under way.
 */
function storeFailure(err: unknown): unknown {
  const mapped = toPolicyError(err);
  if (!(mapped instanceof PolicyError)) return mapped;
  // As every other answer of this service's while its database fails (docs/rate-limits.md).
  if (mapped.code === 'unavailable')
    return new PolicyError('unavailable', mapped.message, { cause: err, headers: { 'retry-after': '1' } });
  if (mapped.code !== 'rules_outcome_unknown') return mapped;
  return new PolicyError(
    'rules_outcome_unknown',
    'The override store lost its connection while committing the change: it may or may not have been applied. List the overrides (GET /api/v1/admin/rule-overrides) before sending it again.',
    { cause: err },
  );
}

const wire = (o: {
  service: string;
  limiter: string;
  subjectKind: string;
  subject: string;
  rules: unknown;
  unreadable?: string | undefined;
  updatedAt?: string | undefined;
}) => ({
  service: o.service,
  limiter: o.limiter,
  subject_kind: o.subjectKind,
  subject: o.subject,
  rules: o.rules,
  ...(o.unreadable !== undefined ? { unreadable: o.unreadable } : {}),
  updated_at: o.updatedAt,
});

export function rulesServiceRoutes(deps: {
  store: OverrideStore;
  available: AvailableLimiters;
  ttlSeconds: number;
  /** The query token (and a rotated-out one during its grace); none required when unset. */
  tokens: QueryTokens;
  clock: Clock;
  lifecycle: Lifecycle;
  bypassPublishers?: readonly string[];
}): Route[] {
  const { store, available, ttlSeconds, tokens, clock, lifecycle } = deps;
  const bypassPublishers = deps.bypassPublishers ?? [];
  // A broken stored override matches every query of its subject: its line at most once a minute.
  const brokenLines = new LogBudget({ linesPerInterval: 1, intervalMs: 60_000 });
  return [
    ...liveAndStatusRoutes(lifecycle),
    {
      methods: ['POST'],
      template: '/api/v1/rules/query',
      access: 'public',
      // A question, not a change.
      audit: null,
      async handle({ req, res, log }) {
        if (!tokens.accepts(req.headers.authorization, clock.monotonicMs())) {
          throw new PolicyError(
            'unauthorized',
            'This rules service requires its token (ARKVORY_RULES_SERVICE_TOKEN).',
            { headers: { 'www-authenticate': 'Bearer realm="arkvory-rules"' } },
          );
        }
        const { query, problems } = validateRulesQuery(await readJsonBody(req), available);
        if (!query) throw invalid(problems);
        const { kinds, stored } = await store.lookup(query.service, query.limiter, query.identifier);
        // Read back within the JSON depth bound (a row may have been written by hand): one that is
        // not is left out and logged, the others answered. Every gateway validates the answer again.
        const matching = new Map<SubjectKind, RuleSpec[]>();
        for (const [subjectKind, { subject, text }] of stored) {
          const { rules, problem } = storedOverrideRules(text);
          if (rules) {
            matching.set(subjectKind, rules);
            continue;
          }
          const key = { service: query.service, limiter: query.limiter, subjectKind, subject };
          const turn = brokenLines.take(`${key.service}/${key.limiter}/${subjectKind}/${subject}`, clock.monotonicMs());
          if (turn.write)
            log.warn(
              { code: 'invalid_stored_override', ...key, problem, suppressed: turn.suppressed },
              'a stored rule override cannot be read back: left out of the answer; remove it (arkvory rules-service unset)',
            );
        }
        sendJson(res, 200, answerFor(kinds, matching, ttlSeconds));
      },
    },
    {
      methods: ['GET'],
      template: OVERRIDES,
      access: 'admin',
      async handle({ res, url }) {
        const service = url.searchParams.get('service') ?? undefined;
        const limiter = url.searchParams.get('limiter') ?? undefined;
        const page = await store.list(
          { ...(service ? { service } : {}), ...(limiter ? { limiter } : {}) },
          pageQuery(url),
        );
        sendJson(res, 200, { overrides: page.items.map(wire), nextCursor: page.nextCursor });
      },
    },
    {
      methods: ['PUT'],
      template: ONE_OVERRIDE,
      access: 'admin',
      audit: 'rule_override.set',
      async handle(ctx) {
        const { req, res, params, principal } = ctx;
        const body = await readJsonBody(req, 1024 * 1024);
        const extra = Object.keys(body).filter((k) => k !== 'rules');
        if (extra.length)
          throw new PolicyError(
            'invalid_request',
            `unknown field(s) ${extra.map((k) => `"${k}"`).join(', ')}; send { "rules": [...] }`,
          );
        if (body.rules === undefined) throw new PolicyError('invalid_request', 'send { "rules": [...] }');
        const { override, problems } = validateOverride(
          {
            service: params.service,
            limiter: params.limiter,
            subjectKind: params.kind,
            subject: params.subject,
            rules: body.rules,
          },
          available,
        );
        if (!override) throw invalid(problems);
        // Spec 2.1: a bypass served to gateways (a skip, or a weaker default rule) is guarded like a published one.
        const bypasses = overrideBypasses(override, available);
        if (bypasses.length && !mayPublishBypass(principal, bypassPublishers))
          throw new PolicyError(
            'forbidden',
            `Refused: ${bypasses.join('; ')}. Only the principals in ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS may serve bypass rules or weaken default rules; operators can also set them with \`arkvory rules-service set\`.`,
          );
        // A write cut while committing may have landed: audited all the same, with `outcome: unknown`.
        const saved = await store.put(override).catch((err: unknown) => {
          throw auditUnknownOutcome(ctx, storeFailure(err), overrideDetails(override.rules));
        });
        ctx.auditDetails = overrideDetails(override.rules);
        sendJson(res, 200, { override: wire(saved) });
      },
    },
    {
      methods: ['DELETE'],
      template: ONE_OVERRIDE,
      access: 'admin',
      audit: 'rule_override.remove',
      async handle(ctx) {
        const { res, params } = ctx;
        const { override, problems } = validateOverride(
          { service: params.service, limiter: params.limiter, subjectKind: params.kind, subject: params.subject },
          available,
        );
        if (!override) throw invalid(problems);
        const removed = await store.remove(override).catch((err: unknown) => {
          throw auditUnknownOutcome(ctx, storeFailure(err));
        });
        if (!removed) throw new PolicyError('not_found', 'No such override.');
        res.writeHead(204).end();
      },
    },
  ];
}
