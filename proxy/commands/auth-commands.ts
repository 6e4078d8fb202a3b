import { AdminStore, parseScopes } from '../../policy/auth/admin-store.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import { PolicyError } from '../../policy/errors.ts';
import { openCliPool } from './cli-database.ts';
import { parseArgs, UsageError, type Command } from './command.ts';

const DATABASE_NOTE = `The database is ARKVORY_DATABASE_URL, or the embedded one of a running \`npm start\` on the same
ARKVORY_DATA_DIR. Output is JSON on stdout.`;

/** Parses `90`, `90s`, `15m`, `12h`, `30d` into seconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(text);
  if (!m) throw new UsageError(`"${text}" is not a duration (e.g. 3600, 90m, 12h, 30d)`);
  const n = Number(m[1]) * ({ '': 1, s: 1, m: 60, h: 3600, d: 86400 } as const)[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`"${text}" must be a positive duration`);
  return n;
}

/** Runs an admin action against the database and prints its JSON result. */
async function withStore(env: NodeJS.ProcessEnv, action: (store: AdminStore) => Promise<unknown>): Promise<number> {
  const pool = await openCliPool(env);
  try {
    const result = await action(new AdminStore(pool));
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
    return 0;
  } catch (err) {
    if (err instanceof PolicyError) {
      process.stderr.write(`arkvory: ${err.code}: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    await pool.end();
  }
}

function need(positionals: string[], count: number, usage: string): string[] {
  if (positionals.length !== count) throw new UsageError(`expected: ${usage}`);
  return positionals;
}

export const principalsCommand: Command = {
  name: 'principals',
  summary: 'create, list, disable or enable principals (service accounts)',
  usage: `Usage:
  arkvory principals create <name>
  arkvory principals list
  arkvory principals disable <name|id>
  arkvory principals enable <name|id>

A principal is a service account with a stable id; all its keys resolve to that id.
${DATABASE_NOTE}`,
  run(args, env) {
    const [sub, ...rest] = args;
    const { positionals } = parseArgs(rest);
    switch (sub) {
      case 'create':
        return withStore(env, (s) => s.createPrincipal(need(positionals, 1, 'principals create <name>')[0]!));
      case 'list':
        return withStore(env, (s) => s.listPrincipals());
      case 'disable':
        return withStore(env, (s) =>
          s.setPrincipalDisabled(need(positionals, 1, 'principals disable <name|id>')[0]!, true),
        );
      case 'enable':
        return withStore(env, (s) =>
          s.setPrincipalDisabled(need(positionals, 1, 'principals enable <name|id>')[0]!, false),
        );
      default:
        throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    }
  },
};

export const keysCommand: Command = {
  name: 'keys',
  summary: 'create, list, revoke or rotate API keys (a new key is printed once)',
  usage: `Usage:
  arkvory keys create <principal> [--scopes read,write,admin] [--expires-in 30d] [--kind service|personal] [--description TEXT]
  arkvory keys list <principal>
  arkvory keys revoke <keyId>
  arkvory keys rotate <keyId> [--expires-in 30d]

Keys look like ark_<keyId>_<secret> and are sent as "Authorization: Bearer <key>". Only a hash of
the secret is stored: the key is shown once, by create and rotate. --scopes defaults to read.
rotate makes a new key with the same principal, scopes and kind; the old key works until revoked.
A revocation takes effect on every gateway within 2 seconds.
${DATABASE_NOTE}`,
  run(args, env) {
    const [sub, ...rest] = args;
    const { flags, positionals } = parseArgs(rest);
    const expires = flags.get('expires-in');
    const expiresInSeconds = typeof expires === 'string' ? parseDuration(expires) : undefined;
    switch (sub) {
      case 'create': {
        const [principal] = need(positionals, 1, 'keys create <principal>');
        const scopes = flags.get('scopes');
        const kind = flags.get('kind');
        const description = flags.get('description');
        return withStore(env, (s) =>
          s.createKey(principal!, {
            scopes: parseScopes(typeof scopes === 'string' ? scopes : 'read'),
            ...(expiresInSeconds ? { expiresInSeconds } : {}),
            ...(typeof kind === 'string' ? { kind: kind as 'service' | 'personal' } : {}),
            ...(typeof description === 'string' ? { description } : {}),
          }),
        );
      }
      case 'list':
        return withStore(env, (s) => s.listKeys(need(positionals, 1, 'keys list <principal>')[0]!));
      case 'revoke':
        return withStore(env, (s) => s.revokeKey(need(positionals, 1, 'keys revoke <keyId>')[0]!));
      case 'rotate':
        return withStore(env, (s) =>
          s.rotateKey(need(positionals, 1, 'keys rotate <keyId>')[0]!, expiresInSeconds ? { expiresInSeconds } : {}),
        );
      default:
        throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    }
  },
};

export const reposCommand: Command = {
  name: 'repos',
  summary: 'create or list repositories',
  usage: `Usage:
  arkvory repos create <name>
  arkvory repos list

Repository names match ^[a-z0-9][a-z0-9._-]{0,63}$.
${DATABASE_NOTE}`,
  run(args, env) {
    const [sub, ...rest] = args;
    const { positionals } = parseArgs(rest);
    switch (sub) {
      case 'create':
        return withStore(env, (s) => s.createRepository(need(positionals, 1, 'repos create <name>')[0]!));
      case 'list':
        return withStore(env, (s) => s.listRepositories());
      default:
        throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    }
  },
};

export const grantsCommand: Command = {
  name: 'grants',
  summary: 'grant, remove or list repository permissions (read|write)',
  usage: `Usage:
  arkvory grants add <principal> <repository> <read|write>
  arkvory grants remove <principal> <repository>
  arkvory grants list [<principal>]

read lets a principal download from the repository; write also lets it upload and delete (with a
key that has the write scope). A repository without any grant is invisible (404) to the principal.
${DATABASE_NOTE}`,
  run(args, env) {
    const [sub, ...rest] = args;
    const { positionals } = parseArgs(rest);
    switch (sub) {
      case 'add': {
        const [principal, repo, permission] = need(positionals, 3, 'grants add <principal> <repository> <read|write>');
        return withStore(env, (s) => s.addGrant(principal!, repo!, permission as Permission));
      }
      case 'remove': {
        const [principal, repo] = need(positionals, 2, 'grants remove <principal> <repository>');
        return withStore(env, (s) => s.removeGrant(principal!, repo!));
      }
      case 'list':
        if (positionals.length > 1) throw new UsageError('expected: grants list [<principal>]');
        return withStore(env, (s) => s.listGrants(positionals[0]));
      default:
        throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    }
  },
};
