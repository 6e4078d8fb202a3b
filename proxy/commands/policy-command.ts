import { readPolicy, resetPolicy, ResetRefused } from '../../policy/lease/download-policy.ts';
import { recordCliAction } from './cli-audit.ts';
import { openCliPool } from './cli-database.ts';
import { defineCommand, form, type Command } from './command.ts';

export const policyCommand: Command = defineCommand({
  name: 'policy',
  summary: 'show or reset the stored shared-download policy and slot leases',
  description: `show prints the stored policy (SLOTS and rates) and every slot lease with its owner, generation
and seconds until expiry.

reset is the documented way to change the budget or the slot count, or to return to standalone:
disable ingress, stop every gateway and the worker and verify they stopped, wait until every lease
has expired, make a backup, then run it. In one transaction it deletes every row of
arkvory_gateway_leases and arkvory_download_policy. It refuses while any lease is unexpired or any
gateway or worker still holds its barrier lock. It resets coordination state only, never the catalog.
Then start the writer with the new configuration, then the readers.`,
  forms: [
    form({ name: 'show', run: (_input, env) => policy('show', env) }),
    form({ name: 'reset', run: (_input, env) => policy('reset', env) }),
  ],
});

async function policy(sub: 'show' | 'reset', env: NodeJS.ProcessEnv): Promise<number> {
  const pool = await openCliPool(env);
  const client = await pool.connect();
  try {
    if (sub === 'show') {
      const policy = await readPolicy(client);
      const leases = await client.query(
        `SELECT slot, role, owner, generation::int, advertise_url AS "advertiseUrl", renewed_at AS "renewedAt",
                  round(extract(epoch FROM expires_at - clock_timestamp())::numeric, 1)::float8 AS "expiresInSeconds"
           FROM arkvory_gateway_leases ORDER BY slot`,
      );
      process.stdout.write(`${JSON.stringify({ policy: policy ?? null, leases: leases.rows }, null, 2)}\n`);
      return 0;
    }
    const result = await resetPolicy(client);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    await recordCliAction(client, { action: 'policy.reset', target: {}, details: { ...result } });
    return 0;
  } catch (err) {
    if (err instanceof ResetRefused) {
      process.stderr.write(`arkvory policy reset: refused: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    client.release();
    await pool.end();
  }
}
