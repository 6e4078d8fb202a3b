import { decimalInteger } from '../../lib/decimal.ts';
import {
  AdminStore,
  checkGroupName,
  checkPrincipalName,
  checkRepositoryName,
  checkRepositoryPrefix,
  MAX_BANDWIDTH_WEIGHT,
  MAX_CEILING_BYTES_PER_SECOND,
  MAX_KEY_LIFETIME_SECONDS,
  MAX_REPOSITORY_TRANSFERS,
  MIN_CEILING_BYTES_PER_SECOND,
  parseScopes,
} from '../../policy/auth/admin-store.ts';
import { CURSORS } from '../../policy/auth/page.ts';
import { PolicyError } from '../../policy/errors.ts';
import {
  certificateDetails,
  grantDetails,
  groupDetails,
  keyDetails,
  principalDetails,
} from '../audit/admin-details.ts';
import { type CliAction, recordCliAction } from './cli-audit.ts';
import { openCliPool } from './cli-database.ts';
import { defineCommand, form, UsageError, type Command } from './command.ts';
import { PAGE_OPTIONS, pageInput, printed } from './page-options.ts';

const DATABASE_NOTE = `The database is ARKVORY_DATABASE_URL, or the embedded one of a running \`npm start\` on the same
ARKVORY_DATA_DIR. Output is JSON on stdout. A list prints one page, { "<items>": [...], "nextCursor": ... }:
pass nextCursor to --cursor for the next page (null: the last).`;

/** Parses `90`, `90s`, `15m`, `12h`, `30d` into seconds. */
export function parseDuration(text: string, options: { zero?: boolean } = {}): number {
  const m = /^([0-9]+)([smhd]?)$/.exec(text);
  if (!m) throw new UsageError(`"${text}" is not a duration (e.g. 3600, 90m, 12h, 30d)`);
  const count = decimalInteger(m[1]!);
  const n =
    count === undefined
      ? Number.NaN
      : count * ({ '': 1, s: 1, m: 60, h: 3600, d: 86400 } as const)[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  if (!Number.isSafeInteger(n) || n < 0 || (n === 0 && !options.zero))
    throw new UsageError(`"${text}" must be a positive duration`);
  return n;
}

/** `--scopes` read before anything is opened: a mistyped scope is a usage error (exit 2), like an option. */
function scopesOption(text: string | undefined): ReturnType<typeof parseScopes> {
  try {
    return parseScopes(text ?? 'read');
  } catch (err) {
    if (err instanceof PolicyError) throw new UsageError(`--scopes: ${err.message}`);
    throw err;
  }
}

/** An argument checked by the store's own rule before anything is opened: a bad one is a usage error (exit 2). */
function argument<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof PolicyError) throw new UsageError(err.message);
    throw err;
  }
}

/** `--kind`, checked like `--scopes`. */
function kindOption(text: string | undefined): 'service' | 'personal' | undefined {
  if (text === undefined || text === 'service' || text === 'personal') return text;
  throw new UsageError(`--kind must be service or personal (got ${text})`);
}

/**
 * Runs an admin action against the database and prints its JSON result; a change (`audit` given)
 * is recorded in the audit trail as the operator's, after its result is printed. A refusal or an
 * audit entry not recorded is the one line cli.ts prints for every command (cli-failure.ts).
 */
async function withStore<T>(
  env: NodeJS.ProcessEnv,
  action: (store: AdminStore) => Promise<T>,
  audit?: (result: T) => CliAction,
): Promise<number> {
  const pool = await openCliPool(env);
  try {
    const result = await action(new AdminStore(pool));
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    if (audit) await recordCliAction(pool, audit(result));
    return 0;
  } finally {
    await pool.end();
  }
}

const CEILING_OPTIONS = {
  download: { type: 'string', value: 'B/s', description: 'download ceiling in bytes/s (0 = none)' },
  upload: { type: 'string', value: 'B/s', description: 'upload ceiling in bytes/s (0 = none)' },
} as const;

/**
 * `text` as a whole number from `min` to `max`, checked before anything is opened: a value the store
 * would refuse is a usage error (exit 2), not a refusal after connecting (exit 1).
 */
function wholeNumber(text: string, what: string, min: number, max: number): number {
  const n = decimalInteger(text);
  if (n === undefined || n < min || n > max)
    throw new UsageError(`${what} must be an integer from ${min} to ${max} (got ${text})`);
  return n;
}

/** `--max-transfers N` as `{ maxTransfers: N }`; left out, nothing. */
function transfersOption(text: string | undefined): { maxTransfers?: number } {
  if (text === undefined) return {};
  return { maxTransfers: wholeNumber(text, '--max-transfers', 0, MAX_REPOSITORY_TRANSFERS) };
}

/** A ceiling option: 0 (none) or MIN_CEILING_BYTES_PER_SECOND .. MAX_CEILING_BYTES_PER_SECOND, as the store takes it. */
function ceilingOption(text: string | undefined, option: string): number | undefined {
  if (text === undefined) return undefined;
  const n = decimalInteger(text);
  if (n === 0) return 0;
  if (n === undefined || n < MIN_CEILING_BYTES_PER_SECOND || n > MAX_CEILING_BYTES_PER_SECOND)
    throw new UsageError(
      `--${option} must be 0 (no ceiling) or an integer from ${MIN_CEILING_BYTES_PER_SECOND} to ${MAX_CEILING_BYTES_PER_SECOND} (got ${text})`,
    );
  return n;
}

function ceilingOptions(input: { string(name: string): string | undefined }): {
  downloadBytesPerSec?: number;
  uploadBytesPerSec?: number;
} {
  const down = ceilingOption(input.string('download'), 'download');
  const up = ceilingOption(input.string('upload'), 'upload');
  return {
    ...(down !== undefined ? { downloadBytesPerSec: down } : {}),
    ...(up !== undefined ? { uploadBytesPerSec: up } : {}),
  };
}

/** `--expires-in` in seconds, checked as an option: past the longest a key lives is a usage error (exit 2). */
function expiresInOption(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const seconds = parseDuration(text);
  if (seconds > MAX_KEY_LIFETIME_SECONDS)
    throw new UsageError(
      `--expires-in "${text}" is longer than ${MAX_KEY_LIFETIME_SECONDS / 86400}d (10 years), the longest a key lives; leave it out for a key that does not expire`,
    );
  return seconds;
}

const EXPIRES_IN = {
  type: 'string',
  value: '30d',
  description: 'the key stops working after this long: seconds, or 90s, 15m, 12h, 30d; at most 3650d (default: never)',
} as const;

export const principalsCommand: Command = defineCommand({
  name: 'principals',
  summary: 'create, list, disable or enable principals (service accounts); set their bandwidth weight',
  description: `A principal is a service account with a stable id; all its keys resolve to that id.
weight sets its bandwidth weight (1..1000, default 1): under contention for a direction's ceiling the
principals transferring share it in proportion to their weights; transfers that start within 2 seconds
use the new weight (docs/bandwidth-and-admission.md, "Weights").
bind-cert makes a verified client certificate (mutual TLS, docs/tls.md) whose subject alternative name
is exactly <san> authenticate the principal: URI:spiffe://example.org/ci, DNS:builder.example.org (a bare
value with :// is a URI, any other a DNS name). unbind-cert, like disable, takes effect within 2 seconds,
also on connections already open.
${DATABASE_NOTE}`,
  forms: [
    form({
      name: 'create',
      args: '<name>',
      run: ({ positionals }, env) => {
        const name = argument(() => checkPrincipalName(positionals[0]));
        return withStore(
          env,
          (s) => s.createPrincipal(name),
          (p) => ({ action: 'principal.create', target: { principal: name }, details: principalDetails(p) }),
        );
      },
    }),
    form({
      name: 'list',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.principals);
        return withStore(env, async (s) => printed('principals')(await s.listPrincipals(page)));
      },
    }),
    form({
      name: 'disable',
      args: '<name|id>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          (s) => s.setPrincipalDisabled(positionals[0]!, true),
          (p) => ({ action: 'principal.disable', target: { principal: positionals[0] }, details: principalDetails(p) }),
        ),
    }),
    form({
      name: 'enable',
      args: '<name|id>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          (s) => s.setPrincipalDisabled(positionals[0]!, false),
          (p) => ({ action: 'principal.enable', target: { principal: positionals[0] }, details: principalDetails(p) }),
        ),
    }),
    form({
      name: 'weight',
      args: '<name|id> <weight>',
      run: ({ positionals }, env) => {
        const weight = wholeNumber(positionals[1]!, 'the weight', 1, MAX_BANDWIDTH_WEIGHT);
        return withStore(
          env,
          (s) => s.setPrincipalWeight(positionals[0]!, weight),
          (p) => ({
            action: 'principal.weight',
            target: { principal: positionals[0] },
            details: { bandwidthWeight: p.bandwidthWeight },
          }),
        );
      },
    }),
    form({
      name: 'bind-cert',
      args: '<principal> <san>',
      options: {
        scopes: {
          type: 'string',
          value: 'read,write,admin',
          description: 'what the certificate may do, comma-separated (default: read)',
        },
      },
      run(input, env) {
        const scopes = scopesOption(input.string('scopes'));
        return withStore(
          env,
          (s) => s.bindCertificate(input.positionals[0]!, input.positionals[1]!, scopes),
          (c) => ({
            action: 'certificate.bind',
            target: { principal: input.positionals[0] },
            details: certificateDetails(c),
          }),
        );
      },
    }),
    form({
      name: 'unbind-cert',
      args: '<principal> <san>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          async (s) => {
            await s.unbindCertificate(positionals[0]!, positionals[1]!);
            return { unbound: positionals[1] };
          },
          () => ({
            action: 'certificate.unbind',
            target: { principal: positionals[0] },
            details: { san: positionals[1] },
          }),
        ),
    }),
    form({
      name: 'certs',
      args: '<principal>',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.certificates);
        return withStore(env, async (s) =>
          printed('certificates')(await s.listCertificates(input.positionals[0]!, page)),
        );
      },
    }),
  ],
});

export const keysCommand: Command = defineCommand({
  name: 'keys',
  summary: 'create, list, revoke or rotate API keys (a new key is printed once)',
  description: `Keys look like ark_<keyId>_<secret> and are sent as "Authorization: Bearer <key>". Only a hash of
the secret is stored: the key is shown once, by create and rotate. --scopes defaults to read.
rotate makes a new key with the same principal, scopes and kind; the old key works until revoked.
A revocation takes effect on every gateway within 2 seconds.
${DATABASE_NOTE}`,
  forms: [
    form({
      name: 'create',
      args: '<principal>',
      options: {
        scopes: {
          type: 'string',
          value: 'read,write,admin',
          description: 'the scopes of the key, comma-separated (default: read)',
        },
        'expires-in': EXPIRES_IN,
        kind: { type: 'string', value: 'service|personal', description: 'the kind of key (default: service)' },
        description: { type: 'string', value: 'TEXT', description: 'a note stored with the key' },
      },
      run(input, env) {
        const expiresInSeconds = expiresInOption(input.string('expires-in'));
        const scopes = scopesOption(input.string('scopes'));
        const kind = kindOption(input.string('kind'));
        const description = input.string('description');
        return withStore(
          env,
          (s) =>
            s.createKey(input.positionals[0]!, {
              scopes,
              ...(expiresInSeconds ? { expiresInSeconds } : {}),
              ...(kind !== undefined ? { kind } : {}),
              ...(description !== undefined ? { description } : {}),
            }),
          (k) => ({ action: 'key.create', target: { principal: input.positionals[0] }, details: keyDetails(k) }),
        );
      },
    }),
    form({
      name: 'list',
      args: '<principal>',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.keys);
        return withStore(env, async (s) => printed('keys')(await s.listKeys(input.positionals[0]!, page)));
      },
    }),
    form({
      name: 'revoke',
      args: '<keyId>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          (s) => s.revokeKey(positionals[0]!),
          (k) => ({ action: 'key.revoke', target: { keyId: positionals[0] }, details: keyDetails(k) }),
        ),
    }),
    form({
      name: 'rotate',
      args: '<keyId>',
      options: {
        'expires-in': { ...EXPIRES_IN, description: 'the new key stops working after this long (default: never)' },
      },
      run(input, env) {
        const expiresInSeconds = expiresInOption(input.string('expires-in'));
        return withStore(
          env,
          (s) => s.rotateKey(input.positionals[0]!, expiresInSeconds ? { expiresInSeconds } : {}),
          (k) => ({
            action: 'key.rotate',
            target: { keyId: input.positionals[0] },
            details: { ...keyDetails(k), rotatedFrom: input.positionals[0] },
          }),
        );
      },
    }),
  ],
});

export const reposCommand: Command = defineCommand({
  name: 'repos',
  summary: 'create or list repositories; set their bandwidth ceilings',
  description: `Repository names match ^[a-z0-9][a-z0-9._-]{0,63}$.
ceiling sets the repository's download and upload ceilings in bytes/s (0 = none, else 65536 to 2^40;
in the shared profile each gateway enforces floor(download / SLOTS)) and its bound on concurrent
transfers per gateway (0 = none; beyond it 429 busy). An option left out keeps its value. Gateways
apply a change within 2 seconds (docs/bandwidth-and-admission.md, "Group and repository ceilings").
${DATABASE_NOTE}`,
  forms: [
    form({
      name: 'create',
      args: '<name>',
      run: ({ positionals }, env) => {
        const name = argument(() => checkRepositoryName(positionals[0]));
        return withStore(
          env,
          (s) => s.createRepository(name),
          (r) => ({ action: 'repository.create', target: { repository: name }, details: { repository: r.name } }),
        );
      },
    }),
    form({
      name: 'list',
      options: {
        ...PAGE_OPTIONS,
        prefix: { type: 'string', value: 'PREFIX', description: 'only the repositories whose name starts with PREFIX' },
      },
      run: (input, env) => {
        const page = pageInput(input, CURSORS.repositories);
        const prefix = argument(() => checkRepositoryPrefix(input.string('prefix')));
        return withStore(env, async (s) => printed('repositories')(await s.listRepositories(page, prefix)));
      },
    }),
    form({
      name: 'ceiling',
      args: '<name>',
      options: {
        ...CEILING_OPTIONS,
        'max-transfers': { type: 'string', value: 'N', description: 'concurrent transfers per gateway (0 = no bound)' },
      },
      run: (input, env) => {
        const ceilings = { ...ceilingOptions(input), ...transfersOption(input.string('max-transfers')) };
        return withStore(
          env,
          (s) => s.setRepositoryCeilings(input.positionals[0]!, ceilings),
          (r) => ({ action: 'repository.ceiling', target: { repository: input.positionals[0] }, details: { ...r } }),
        );
      },
    }),
  ],
});

export const groupsCommand: Command = defineCommand({
  name: 'groups',
  summary: 'groups of principals and their bandwidth ceilings',
  description: `A group gathers principals under shared download and upload ceilings in bytes/s (0 = none, else
65536 to 2^40; in the shared profile each gateway enforces floor(download / SLOTS)). A principal may be
in several groups; a transfer is paced by every bucket it belongs to. set creates a group or changes
its ceilings (an option left out keeps its value). Gateways apply a change within 2 seconds
(docs/bandwidth-and-admission.md, "Group and repository ceilings"). list prints one page of groups, each
with its first 100 members and membersNextCursor (null: that is all of them), { "groups": [...],
"nextCursor": … }; members prints one page of a group's members, { "members": [...], "nextCursor": … }.
The database is ARKVORY_DATABASE_URL, or the embedded one of a running \`npm start\` on the same
ARKVORY_DATA_DIR. Output is JSON on stdout.`,
  forms: [
    form({
      name: 'set',
      args: '<group>',
      options: CEILING_OPTIONS,
      run: (input, env) => {
        const name = argument(() => checkGroupName(input.positionals[0]));
        const ceilings = ceilingOptions(input);
        return withStore(
          env,
          (s) => s.setGroup(name, ceilings),
          (g) => ({ action: 'group.set', target: { group: input.positionals[0] }, details: groupDetails(g) }),
        );
      },
    }),
    form({
      name: 'add',
      args: '<group> <principal>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          (s) => s.addGroupMember(positionals[0]!, positionals[1]!),
          () => ({ action: 'group.add_member', target: { group: positionals[0], principal: positionals[1] } }),
        ),
    }),
    form({
      name: 'remove',
      args: '<group> <principal>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          (s) => s.removeGroupMember(positionals[0]!, positionals[1]!),
          () => ({ action: 'group.remove_member', target: { group: positionals[0], principal: positionals[1] } }),
        ),
    }),
    form({
      name: 'delete',
      args: '<group>',
      run: ({ positionals }, env) =>
        withStore(
          env,
          async (s) => {
            await s.deleteGroup(positionals[0]!);
            return { deleted: positionals[0] };
          },
          () => ({ action: 'group.delete', target: { group: positionals[0] } }),
        ),
    }),
    form({
      name: 'list',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.groups);
        return withStore(env, async (s) => printed('groups')(await s.listGroupsPage(page)));
      },
    }),
    form({
      name: 'members',
      args: '<group>',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.groupMembers);
        return withStore(env, async (s) => printed('members')(await s.listGroupMembers(input.positionals[0]!, page)));
      },
    }),
  ],
});

export const grantsCommand: Command = defineCommand({
  name: 'grants',
  summary: 'grant, remove or list repository permissions (read|write)',
  description: `read lets a principal download from the repository; write also lets it upload and delete (with a
key that has the write scope). A repository without any grant is invisible (404) to the principal.
${DATABASE_NOTE}`,
  forms: [
    form({
      name: 'add',
      args: '<principal> <repository> <read|write>',
      run({ positionals: [principal, repo, permission] }, env) {
        if (permission !== 'read' && permission !== 'write')
          throw new UsageError(`the permission must be read or write (got ${permission})`);
        return withStore(
          env,
          (s) => s.addGrant(principal!, repo!, permission),
          (g) => ({ action: 'grant.set', target: { principal, repository: repo }, details: grantDetails(g) }),
        );
      },
    }),
    form({
      name: 'remove',
      args: '<principal> <repository>',
      run: ({ positionals: [principal, repo] }, env) =>
        withStore(
          env,
          (s) => s.removeGrant(principal!, repo!),
          () => ({ action: 'grant.remove', target: { principal, repository: repo } }),
        ),
    }),
    form({
      name: 'list',
      args: '[<principal>]',
      options: PAGE_OPTIONS,
      run: (input, env) => {
        const page = pageInput(input, CURSORS.grants);
        return withStore(env, async (s) => printed('grants')(await s.listGrants(input.positionals[0], page)));
      },
    }),
  ],
});
