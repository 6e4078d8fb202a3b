import { rotatePresignSecret } from '../../policy/auth/presigned-links.ts';
import { parseDuration } from './auth-commands.ts';
import { openCliPool } from './cli-database.ts';
import { parseArgs, UsageError, type Command } from './command.ts';

export const presignSecretCommand: Command = {
  name: 'presign-secret',
  summary: 'rotate the secret that signs pre-signed links (old links die, after an optional grace period)',
  usage: `Usage:
  arkvory presign-secret rotate [--grace 10m]

A new secret signs every link made from now on. Links signed by the old one stop working at once
(within the 2 s bound of any revocation), or after --grace (e.g. 15m, 12h, 7d) so links already handed
out keep working while their users fetch new ones. The database is ARKVORY_DATABASE_URL, or the
embedded one of a running \`npm start\` on the same ARKVORY_DATA_DIR. Output is JSON on stdout.`,
  async run(args, env) {
    const [sub, ...rest] = args;
    if (sub !== 'rotate') throw new UsageError(`unknown subcommand "${sub ?? ''}"`);
    const { flags, positionals } = parseArgs(rest);
    if (positionals.length > 0) throw new UsageError('expected: presign-secret rotate [--grace DURATION]');
    const grace = flags.get('grace');
    const graceSeconds = grace === undefined ? 0 : parseDuration(String(grace));
    const pool = await openCliPool(env);
    try {
      process.stdout.write(`${JSON.stringify(await rotatePresignSecret(pool, graceSeconds), null, 2)}\n`);
      return 0;
    } finally {
      await pool.end();
    }
  },
};
