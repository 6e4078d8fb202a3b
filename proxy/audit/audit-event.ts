/**
 * The audit trail's vocabulary (pure): the actions recorded, who did one, an entry as it is
 * written, an event as it is read back, and the filters of a listing. docs/observability.md lists
 * the actions; test/contract checks that list against this catalogue.
 */
import { parseInstant } from '../../lib/calendar-date.ts';
import { CURSORS, decodeCursor, invalidCursor, pageLimit } from '../../policy/auth/page.ts';
import { GatewayError } from '../server/errors.ts';

/** Every action the trail records, with what it means. Names are `<noun>.<verb>`, stable once released. */
export const AUDIT_ACTIONS = {
  'principal.create': 'a principal (service account) was created',
  'principal.disable': 'a principal was disabled',
  'principal.enable': 'a principal was enabled again',
  'key.create': 'an API key was created',
  'key.revoke': 'an API key was revoked',
  'key.rotate': 'an API key was rotated (a new key made for its principal)',
  'certificate.bind': 'a client certificate was bound to a principal',
  'certificate.unbind': 'a client certificate binding was removed',
  'principal.weight': "a principal's bandwidth weight was set",
  'repository.create': 'a repository was created',
  'repository.ceiling': "a repository's bandwidth ceilings or transfer bound were set",
  'group.set': 'a group was created or its bandwidth ceilings changed',
  'group.add_member': 'a principal was added to a group',
  'group.remove_member': 'a principal was removed from a group',
  'group.delete': 'a group was deleted',
  'grant.set': "a principal's grant on a repository was added or changed",
  'grant.remove': "a principal's grant on a repository was removed",
  'rate_limit.publish': 'rate-limit rules were published (published tier)',
  'rate_limit.unpublish': 'a published rate-limit rule was deleted',
  'rule_override.set': 'the rules service stored an override',
  'rule_override.remove': 'the rules service removed an override',
  'artifact.publish': 'an artifact, package or asset was uploaded (or its multipart upload completed)',
  'artifact.delete': 'an artifact, package or asset was deleted from the catalog',
  'cache.purge': "a blob was purged from every gateway's slice cache",
  'console.sign_in': 'a console session was opened',
  'console.sign_in_failed':
    'a console sign-in was refused (an unknown, wrong or stale key, or one without the admin scope); at most 5 a minute per client address and 60 in all, the next entry counting those left out',
  'console.sign_out': 'a console session was closed',
  'quota.set': 'a storage quota of a repository or principal was set',
  'quota.remove': 'a storage quota of a repository or principal was removed',
  'presign_secret.rotate': 'the secret that signs pre-signed links was rotated',
  'policy.reset': 'the stored shared-download policy and slot leases were reset',
  'backup.create': 'a backup was made',
  'backup.restore': 'a backup was restored',
  'maintenance.scrub': 'scrub ran',
  'maintenance.gc': 'gc ran',
} as const;

export type AuditAction = keyof typeof AUDIT_ACTIONS;

export function isAuditAction(name: string): name is AuditAction {
  return Object.hasOwn(AUDIT_ACTIONS, name);
}

/**
 * Who did it: a principal through the API, the operator of a CLI command (OS user and host), or
 * nobody the gateway knows (a refused sign-in with an unknown or wrong key).
 */
export type Actor =
  | { readonly kind: 'principal'; readonly principalId: string; readonly principalName: string }
  | { readonly kind: 'operator'; readonly operator: string; readonly host: string }
  | { readonly kind: 'anonymous' };

/** One action as it is recorded. */
export interface AuditEntry {
  readonly action: AuditAction;
  readonly actor: Actor;
  /** The client address (API), or `cli`. */
  readonly source: string;
  /** The gateway's id of the request (or the CLI run's): never one the client chose. */
  readonly requestId?: string | undefined;
  /** The `X-Request-Id` the client sent, if any: its own correlation, not trusted to name the request. */
  readonly clientRequestId?: string | undefined;
  /**
   * What it was done to: the route's parameters (or what the route records instead, as a quota's
   * scope and subject id), or the command's arguments.
   */
  readonly target: Readonly<Record<string, unknown>>;
  /** What came of it (ids made, sizes, counts): never a key, secret or password. */
  readonly details: Readonly<Record<string, unknown>>;
}

/** One recorded action as the admin API and `arkvory audit` print it. */
export interface AuditEvent {
  readonly id: string;
  readonly at: string;
  readonly action: string;
  readonly actor: Actor;
  readonly source: string;
  readonly requestId: string | null;
  readonly clientRequestId: string | null;
  readonly target: Record<string, unknown>;
  readonly details: Record<string, unknown>;
}

/** A listing's filters, checked. Newest first; `beforeId` continues after a page. */
export interface AuditFilter {
  /** An action (`key.revoke`) or every action of a noun (`key`). */
  readonly action?: string;
  /** A principal's id or name. */
  readonly principal?: string;
  readonly since?: Date;
  readonly until?: Date;
  readonly beforeId?: string;
  readonly limit: number;
}

const NOUN = /^[a-z][a-z_]*$/;
/** The largest PostgreSQL bigint, the type of an event id. */
const INT8_MAX = 9223372036854775807n;

function instant(raw: string, name: string): Date {
  const at = parseInstant(raw);
  if (!at)
    throw new GatewayError('invalid_request', `${name} must be a date or an ISO 8601 time, e.g. 2026-01-31T12:00:00Z`);
  return at;
}

/** The filters of a listing, from query parameters or CLI options; anything malformed is `invalid_request`. */
export function parseAuditFilter(raw: {
  readonly action?: string | undefined;
  readonly principal?: string | undefined;
  readonly since?: string | undefined;
  readonly until?: string | undefined;
  readonly limit?: string | undefined;
  readonly cursor?: string | undefined;
}): AuditFilter {
  const filter: {
    action?: string;
    principal?: string;
    since?: Date;
    until?: Date;
    beforeId?: string;
    limit: number;
  } = { limit: pageLimit(raw.limit) };
  if (raw.action) {
    if (
      !isAuditAction(raw.action) &&
      !(NOUN.test(raw.action) && Object.keys(AUDIT_ACTIONS).some((a) => a.startsWith(`${raw.action}.`)))
    )
      throw new GatewayError(
        'invalid_request',
        `action "${raw.action}" is neither an audit action nor the noun of one`,
      );
    filter.action = raw.action;
  }
  if (raw.principal) {
    if (raw.principal.length > 128) throw new GatewayError('invalid_request', 'principal is at most 128 characters');
    filter.principal = raw.principal;
  }
  if (raw.since) filter.since = instant(raw.since, 'since');
  if (raw.until) filter.until = instant(raw.until, 'until');
  const cursor = decodeCursor(raw.cursor, CURSORS.audit);
  if (cursor) {
    // The id is compared as ::bigint: 19 digits can exceed it, and PostgreSQL would refuse with a 500.
    if (BigInt(cursor[0]!) > INT8_MAX) throw invalidCursor();
    filter.beforeId = cursor[0]!;
  }
  return filter;
}
