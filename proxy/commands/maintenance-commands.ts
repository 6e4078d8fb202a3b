import type pg from 'pg';
import { barrierHolderNames, tryLockExclusive } from '../../policy/lease/barriers.ts';
import { ensureStorageIdentity } from '../../storage-adapter/identity.ts';
import { collectGarbage, type GcReport } from '../../storage-adapter/maintenance/gc.ts';
import { scrubBlobs, type ScrubReport } from '../../storage-adapter/maintenance/scrub.ts';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { deleteSliceDigests, recordSliceDigests } from '../../storage-adapter/catalog/slice-rows.ts';
import type { StoreTree } from '../../storage-adapter/store.ts';
import { openStore } from '../content/storage.ts';
import { loadCliConfig, openOfflineCliPool } from './cli-database.ts';
import { defineCommand, form, type Command } from './command.ts';
import { AuditNotRecorded, recordCliAction } from './cli-audit.ts';
import { cliFailureLine } from './cli-failure.ts';
import { maintenanceRefusal } from './maintenance-barrier.ts';

/** A bar on a terminal, a JSON line every 5 s otherwise. */
export function progressReporter(label: string): { update(text: string): void; done(): void } {
  const tty = process.stderr.isTTY;
  let last = 0;
  return {
    update(text) {
      const now = Date.now();
      if (tty) process.stderr.write(`\r${label}: ${text}\u001b[K`);
      else if (now - last >= 5000) {
        last = now;
        process.stderr.write(
          `${JSON.stringify({ time: new Date(now).toISOString(), msg: `${label} progress`, progress: text })}\n`,
        );
      }
    },
    done() {
      if (tty) process.stderr.write('\n');
    },
  };
}

/**
 * Runs `work` while holding the maintenance barrier exclusively on a connection of its own: refused
 * while any gateway, worker or backup of this database is alive (each holds the barrier shared).
 */
async function underMaintenanceBarrier(
  env: NodeJS.ProcessEnv,
  name: string,
  work: (pool: pg.Pool, root: string | StoreTree) => Promise<number>,
): Promise<number> {
  const config = await loadCliConfig(env);
  const { pool, close } = await openOfflineCliPool(env);
  const client = await pool.connect();
  try {
    if (!(await tryLockExclusive(client, 'maintenance'))) {
      // Refused at once, never waiting: a gateway holds the barrier until it is stopped.
      process.stderr.write(
        `arkvory ${name}: refused: ${maintenanceRefusal(await barrierHolderNames(client, 'maintenance'))}\n`,
      );
      return 1;
    }
    if (config.storage.url === undefined) {
      await ensureStorageIdentity({ root: config.dataDir, role: 'reader', pool });
      return await work(pool, config.dataDir);
    }
    // The static-HTTP store: same work over HTTP (listing needs `autoindex_format json` on the store).
    const store = await openStore(config, 'reader', pool);
    try {
      return await work(pool, store.tree);
    } finally {
      await store.close();
    }
  } finally {
    client.release();
    await close();
  }
}

/** What a gc run is recorded with: counts, not its (unbounded) lists. */
function gcSummary(report: GcReport): Record<string, number> {
  return {
    keptBlobs: report.keptBlobs,
    orphanBlobs: report.orphanBlobs.length,
    staleTmp: report.staleTmp.length,
    staleUploads: report.staleUploads.length,
    incompleteUploads: report.incompleteUploads.length,
    bytesFreed: report.bytesFreed,
  };
}

/**
 * Exit code of a scrub that found no damage but left blobs unjudged (`ScrubReport.unjudged`: a read
 * cut short, a blob replaced before its move): not 0, since not every blob was judged, and not 1,
 * since nothing was found damaged; a script runs scrub again.
 */
export const EXIT_SCRUB_AGAIN = 4;

/** 1 when any blob was corrupt or missing (that outweighs the rest), 4 when any was left unjudged, else 0. */
export function scrubExitCode(report: ScrubReport): number {
  if (report.corrupt.length > 0 || report.missing.length > 0) return 1;
  return report.unjudged.length > 0 ? EXIT_SCRUB_AGAIN : 0;
}

export const scrubCommand: Command = defineCommand({
  name: 'scrub',
  summary:
    'offline: re-hash every blob, quarantine mismatches, name referenced blobs missing (exit 1 if any, 4 if some left unjudged)',
  description: `Offline maintenance. Re-hashes every blob under <ARKVORY_DATA_DIR>/blobs (or <ARKVORY_STORAGE_URL>/blobs)
and moves any whose bytes do not match its sha256 name into quarantine/ (nothing is deleted). Records the
per-slice digests the slice cache checks against (ARKVORY_CACHE_SLICE_BYTES) for blobs published before they
were, and forgets those of quarantined blobs. Lists as missing every blob a catalog row references that
the store does not hold (lost, or quarantined by an earlier scrub). Prints a JSON
summary; exits 1 when any blob was corrupt or missing, 4 when none was but some were left unjudged
("unjudged": a read that ended with another size than the store lists, twice, or a blob replaced
between its read and its move to quarantine/; nothing of theirs was moved: run scrub again), 3 when
none of these but its audit entry was not recorded. Refuses at once while a gateway, worker or backup of the
database runs. Without ARKVORY_DATABASE_URL it starts the embedded database of the stopped gateway
itself, and stops it after.
Progress: a bar on a terminal, a log line every 5 s otherwise.`,
  forms: [
    form({
      run(_input, env) {
        return underMaintenanceBarrier(env, 'scrub', async (pool, root) => {
          const progress = progressReporter('scrub');
          const { sliceBytes } = (await loadCliConfig(env)).sliceCache;
          const referenced = await createCatalog(pool).referencedBlobs();
          const report = await scrubBlobs(root, {
            referenced,
            onProgress: (n, bytes) => progress.update(`${n} blobs, ${(bytes / 1048576).toFixed(1)} MiB`),
            // Backfill: blobs published before slice digests were recorded get them now; a
            // quarantined blob loses them, so no gateway's slice cache serves it again.
            sliceBytes,
            onChecked: async (blob, digests) => {
              if (digests) await recordSliceDigests(pool, blob, digests);
              else await deleteSliceDigests(pool, [blob]);
            },
          });
          progress.done();
          process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
          const exit = scrubExitCode(report);
          try {
            await recordCliAction(pool, {
              action: 'maintenance.scrub',
              target: {},
              details: {
                corrupt: report.corrupt.length,
                first: report.corrupt.slice(0, 100),
                missing: report.missing.length,
                firstMissing: report.missing.slice(0, 100),
                unjudged: report.unjudged.length,
                firstUnjudged: report.unjudged.slice(0, 100),
              },
            });
          } catch (err) {
            // Damage found, or blobs to scrub again, outweigh a missing audit entry (exit 1 as
            // restore's, or 4), which is said all the same.
            if (exit === 0 || !(err instanceof AuditNotRecorded)) throw err;
            process.stderr.write(cliFailureLine(err));
          }
          if (exit === EXIT_SCRUB_AGAIN)
            process.stderr.write(
              `arkvory scrub: ${report.unjudged.length} blob(s) left unjudged, nothing moved (listed under "unjudged"): run scrub again\n`,
            );
          return exit;
        });
      },
    }),
  ],
});

export const gcCommand: Command = defineCommand({
  name: 'gc',
  summary: 'offline: remove unreferenced blobs and stale tmp/ and uploads/ files (--dry-run lists them)',
  description: `Offline maintenance. Removes blobs that no catalog row references, every file in tmp/ (stray
temporaries), and upload part files or session folders that no open upload session owns; on the
directory store or, with ARKVORY_STORAGE_URL, on the static-HTTP store. --dry-run lists them and removes
nothing. Prints a JSON summary. Refuses at once while a gateway, worker or backup of the database
runs. Without ARKVORY_DATABASE_URL it starts the embedded database of the stopped gateway itself, and
stops it after.`,
  forms: [
    form({
      options: { 'dry-run': { type: 'boolean', description: 'list what would be removed and remove nothing' } },
      run(input, env) {
        return underMaintenanceBarrier(env, 'gc', async (pool, root) => {
          const progress = progressReporter('gc');
          const report = await collectGarbage(root, pool, {
            dryRun: input.boolean('dry-run'),
            onProgress: (n) => progress.update(`${n} blobs`),
          });
          progress.done();
          process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
          // A dry run changes nothing: not an action of the trail.
          if (!input.boolean('dry-run'))
            await recordCliAction(pool, { action: 'maintenance.gc', target: {}, details: gcSummary(report) });
          return 0;
        });
      },
    }),
  ],
});
