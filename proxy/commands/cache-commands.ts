import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { requestCachePurge } from '../../storage-adapter/catalog/slice-rows.ts';
import { isSha256Hex } from '../../storage-adapter/paths.ts';
import { recordCliAction } from './cli-audit.ts';
import { loadCliConfig, openCliPool } from './cli-database.ts';
import { defineCommand, form, UsageError, type Command } from './command.ts';

/**
 * What the slice cache directory holds (read from the directory: works with the gateway stopped):
 * a single process's slices/ and every worker's w<index>/slices/ together.
 */
async function diskStats(dir: string): Promise<{ dir: string; slices: number; bytes: number; blobs: number }> {
  let slices = 0;
  let bytes = 0;
  const blobs = new Set<string>();
  const workers = (await readdir(dir).catch(() => [])).filter((name) => /^w\d+$/.test(name));
  for (const root of [dir, ...workers.map((w) => path.join(dir, w))].map((d) => path.join(d, 'slices'))) {
    for (const shard of await readdir(root).catch(() => [])) {
      for (const name of await readdir(path.join(root, shard)).catch(() => [])) {
        const parsed = /^([0-9a-f]{64})-\d+-\d+$/.exec(name);
        if (!parsed) continue;
        slices++;
        bytes += (await stat(path.join(root, shard, name)).catch(() => ({ size: 0 }))).size;
        blobs.add(parsed[1]!);
      }
    }
  }
  return { dir, slices, bytes, blobs: blobs.size };
}

export const cacheCommand: Command = defineCommand({
  name: 'cache',
  summary: 'the slice cache of remote stores: purge blobs from every gateway, show what is held',
  description: `purge: asks every gateway to drop its cached slices of a blob (by --sha256, or by --repository and
--artifact); each does within the catalog cache's bound (2 s), through the database (ARKVORY_DATABASE_URL, or the
embedded one on the same ARKVORY_DATA_DIR). The store is not touched: the next read fetches and verifies again.
stats: what the cache directory (ARKVORY_CACHE_DIR) holds, every worker's part together, read from disk; live
counters are GET /api/v1/admin/cache on a gateway and its /metrics. Output is JSON on stdout.`,
  forms: [
    form({
      name: 'purge',
      options: {
        sha256: { type: 'string', value: 'HEX', description: 'the blob to purge' },
        repository: { type: 'string', value: 'REPO', description: 'with --artifact: the artifact whose blob to purge' },
        artifact: { type: 'string', value: 'ID', description: 'with --repository: the artifact whose blob to purge' },
      },
      async run(input, env) {
        const sha256 = input.string('sha256');
        const repository = input.string('repository');
        const artifact = input.string('artifact');
        const byArtifact = repository !== undefined || artifact !== undefined;
        if (
          (sha256 !== undefined) === byArtifact ||
          (byArtifact && (repository === undefined || artifact === undefined))
        )
          throw new UsageError('give --sha256, or --repository and --artifact');
        if (sha256 !== undefined && !isSha256Hex(sha256))
          throw new UsageError('--sha256 must be 64 lowercase hex digits');
        const pool = await openCliPool(env);
        try {
          let blob = sha256;
          if (blob === undefined) {
            const entry = await createCatalog(pool).get({
              repository: repository!,
              kind: 'artifact',
              name: artifact!,
              version: '',
              asset: '',
            });
            if (!entry) {
              process.stderr.write(`arkvory cache purge: no artifact ${artifact} in repository ${repository}\n`);
              return 1;
            }
            blob = entry.sha256;
          }
          await requestCachePurge(pool, [blob]);
          process.stdout.write(`${JSON.stringify({ purged: [blob] }, null, 2)}\n`);
          await recordCliAction(pool, {
            action: 'cache.purge',
            target: sha256 !== undefined ? { sha256 } : { repository, artifact },
            details: { purged: [blob] },
          });
          return 0;
        } finally {
          await pool.end();
        }
      },
    }),
    form({
      name: 'stats',
      async run(_input, env) {
        const { dir } = (await loadCliConfig(env)).sliceCache;
        if (dir === undefined) {
          process.stdout.write(`${JSON.stringify({ enabled: false }, null, 2)}\n`);
          return 0;
        }
        process.stdout.write(`${JSON.stringify({ enabled: true, ...(await diskStats(dir)) }, null, 2)}\n`);
        return 0;
      },
    }),
  ],
});
