import { rotatePresignSecret } from '../../policy/auth/presigned-links.ts';
import { parseDuration } from './auth-commands.ts';
import { recordCliAction } from './cli-audit.ts';
import { openCliPool } from './cli-database.ts';
import { defineCommand, form, UsageError, type Command } from './command.ts';

/**
 * Longest grace: no link lives longer (ARKVORY_PRESIGN_MAX_EXPIRES_SECONDS is at most a year), and
 * far beyond it lies a date JavaScript cannot hold.
 */
const MAX_GRACE_SECONDS = 365 * 24 * 3600;

export const presignSecretCommand: Command = defineCommand({
  name: 'presign-secret',
  summary: 'rotate the secret that signs pre-signed links (old links die, after an optional grace period)',
  description: `A new secret signs every link made from now on. Links signed by the old one stop working at once
(within the 2 s bound of any revocation), or after --grace (e.g. 15m, 12h, 7d) so links already handed
out keep working while their users fetch new ones (at most 365d: no link lives longer). The database
is ARKVORY_DATABASE_URL, or the embedded one of a running \`npm start\` on the same ARKVORY_DATA_DIR.
Output is JSON on stdout.`,
  forms: [
    form({
      name: 'rotate',
      options: {
        grace: {
          type: 'string',
          value: '10m',
          description: 'links signed by the old secret keep working this long (default, or 0: they stop at once)',
        },
      },
      async run(input, env) {
        const grace = input.string('grace');
        // 0 is the default's own value: old links stop at once.
        const graceSeconds = grace === undefined ? 0 : parseDuration(grace, { zero: true });
        if (graceSeconds > MAX_GRACE_SECONDS)
          throw new UsageError(`--grace "${grace}" is longer than 365d, the longest any link lives`);
        const pool = await openCliPool(env);
        try {
          const rotated = await rotatePresignSecret(pool, graceSeconds);
          process.stdout.write(`${JSON.stringify(rotated, null, 2)}\n`);
          await recordCliAction(pool, { action: 'presign_secret.rotate', target: {}, details: { graceSeconds } });
          return 0;
        } finally {
          await pool.end();
        }
      },
    }),
  ],
});
