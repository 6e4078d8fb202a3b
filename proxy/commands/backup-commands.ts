/**
 * `arkvory backup <destination>` and `arkvory restore [--verify] <source>` (storage-adapter/backup/).
 * Exit codes like scrub: 0 done and clean, 1 failed or found damage, 2 usage; and 3 done but its audit
 * entry not recorded (as every command, cli-audit.ts), so a script tells a backup it has from one it has not;
 * 4 a restore done whose scrub left blobs unjudged (as scrub's own 4).
 */
import { decimalInteger } from '../../lib/decimal.ts';
import { GatewayError } from '../server/errors.ts';
import { redactRedisTarget, ruleDocumentsPrefix } from '../../policy/rate-limit/redis-target.ts';
import { AuditNotRecorded, EXIT_AUDIT_NOT_RECORDED, recordCliAction, type CliAction } from './cli-audit.ts';
import path from 'node:path';
import { pino } from 'pino';
import type pg from 'pg';
import { listMigrations, migrate } from '../../migrations/runner.ts';
import { BandwidthGovernor } from '../../policy/bandwidth/index.ts';
import { MAX_RATE_BYTES_PER_SEC } from '../../policy/bandwidth/token-bucket.ts';
import { systemClock } from '../../policy/clock.ts';
import { tryLockExclusive, tryLockShared } from '../../policy/lease/barriers.ts';
import { upsertPgRuleDocuments } from '../../policy/rate-limit/pg-rule-documents.ts';
import { createRedisRuleDocuments } from '../../policy/rate-limit/redis-rule-documents.ts';
import type { RuleDocumentStore } from '../../policy/rate-limit/rule-documents.ts';
import type { LimiterRules } from '../../policy/rate-limit/rules.ts';
import { resolveBackup } from '../../storage-adapter/backup/backup-dir.ts';
import { runBackup } from '../../storage-adapter/backup/backup.ts';
import { BackupError } from '../../storage-adapter/backup/errors.ts';
import {
  type CheckedBackup,
  checkBackup,
  refuseOccupiedDatabase,
  runRestore,
} from '../../storage-adapter/backup/restore.ts';
import { verifyBackup } from '../../storage-adapter/backup/verify.ts';
import type { ArtifactStore } from '../../storage-adapter/store.ts';
import type { Config } from '../config/config.ts';
import { createPool } from '../server/database.ts';
import { embeddedDatabaseOwner, startEmbeddedDatabase, type EmbeddedDatabase } from '../server/embedded-database.ts';
import { createLogger } from '../server/logger.ts';
import { prepareDataDir, restrictCreatedFileModes } from '../server/startup-checks.ts';
import { openStore } from '../content/storage.ts';
import { loadCliConfig, openCliPool } from './cli-database.ts';
import { defineCommand, form, UsageError, type Command } from './command.ts';
import { BACKUP_APPLICATION_NAME } from './maintenance-barrier.ts';
import { EXIT_SCRUB_AGAIN, progressReporter, scrubExitCode } from './maintenance-commands.ts';
import type { ScrubReport } from '../../storage-adapter/maintenance/scrub.ts';

const MiB = 1048576;

/**
 * The rule document store of a configuration with Redis (documents live there, not in the database),
 * opened as the gateways open it: a single Redis, or a Cluster from several seeds, whose documents
 * share one hash tag (`ruleDocumentsPrefix`).
 */
async function openRedisRuleDocuments(config: Config): Promise<{
  documents: RuleDocumentStore;
  readAll(): Promise<Record<string, unknown>>;
  close(): void;
}> {
  const { createRateLimitRedis } = await import('../gates/rate-limit-redis.ts');
  const redis = createRateLimitRedis(config.redisUrl!, pino({ level: 'silent' }), systemClock);
  try {
    await redis.connect();
  } catch (err) {
    redis.disconnect();
    throw new GatewayError(
      'redis_unreachable',
      `Redis at ${redactRedisTarget(config.redisUrl!)} did not answer: ${(err as Error).message}`,
    );
  }
  const documents = createRedisRuleDocuments(redis, ruleDocumentsPrefix(config.redisKeyPrefix, redis.isCluster));
  // A read that fails after the connect (Redis gone or restarted meanwhile, a login that may not read
  // the documents) is said in one line as a connect failure is, not as a bug.
  const reading = async <T>(work: () => Promise<T>): Promise<T> => {
    try {
      return await work();
    } catch (err) {
      throw new GatewayError(
        'redis_unreachable',
        `Redis at ${redactRedisTarget(config.redisUrl!)} did not give the rule documents: ${(err as Error).message}`,
        { cause: err },
      );
    }
  };
  return {
    documents,
    readAll: () => reading(async () => Object.fromEntries(await documents.read(await documents.listIndexed()))),
    close: () => redis.disconnect(),
  };
}
const progressText = (done: number, total: number, bytes: number) =>
  `${done}/${total} blobs, ${(bytes / MiB).toFixed(1)} MiB`;

function positiveInteger(raw: string | undefined, name: string, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (raw === undefined) return undefined;
  const n = decimalInteger(raw);
  if (n === undefined || n < 1 || n > max)
    throw new UsageError(`--${name} must be an integer from 1 to ${max} (got ${raw})`);
  return n;
}

/** SIGINT/SIGTERM abort the work (its partial output is removed) instead of killing the process mid-write. */
async function abortableBySignals<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const stop = (signal: NodeJS.Signals) => controller.abort(new Error(`stopped by ${signal}`));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  try {
    return await work(controller.signal);
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}

/**
 * The one line for our errors and the file system's (EACCES, ENOSPC, …), or undefined for anything
 * else (a bug, which keeps its stack). A file-system message already starts with its code.
 */
export function backupFailureLine(name: string, err: unknown): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (!(err instanceof Error) || (typeof code !== 'string' && !err.message.startsWith('stopped by SIG'))) return;
  const prefix = typeof code === 'string' && !err.message.startsWith(`${code}:`) ? `${code}: ` : '';
  return `arkvory ${name}: ${prefix}${err.message}\n`;
}

/** A failure as one line on stderr, exit 1; anything else is a bug and keeps its stack. */
function failed(name: string, err: unknown): number {
  const line = backupFailureLine(name, err);
  if (line === undefined) throw err;
  process.stderr.write(line);
  return 1;
}

/** Counts of damage found, said as `N blob(s) corrupt, N missing of N checked`. */
function damageCounts(report: { checked: number; corrupt: readonly unknown[]; missing: readonly unknown[] }): string {
  return `${report.corrupt.length} blob(s) corrupt, ${report.missing.length} missing of ${report.checked} checked`;
}

/**
 * A committed restore's exit code from its scrub and `recorded` (recordDone's code): damage found
 * outweighs the rest (1), then blobs the scrub left unjudged (4, as scrub's own: the restore stands,
 * but not every blob was judged, so run scrub again), then a missing audit entry (3).
 */
export function restoreExitCode(scrub: ScrubReport, recorded: number): number {
  const code = scrubExitCode(scrub);
  return code === 0 ? recorded : code;
}

/**
 * Records a finished backup or restore: 0, or EXIT_AUDIT_NOT_RECORDED with one line on stderr when the
 * entry cannot be written (the work stands, its summary is on stdout).
 */
async function recordDone(name: string, pool: pg.Pool, done: CliAction): Promise<number> {
  try {
    await recordCliAction(pool, done);
    return 0;
  } catch (err) {
    if (!(err instanceof AuditNotRecorded)) throw err;
    process.stderr.write(`arkvory ${name}: ${err.code}: ${err.message}\n`);
    return EXIT_AUDIT_NOT_RECORDED;
  }
}

export const backupCommand: Command = defineCommand({
  name: 'backup',
  summary:
    'a consistent backup (one database snapshot + every blob it references) into a directory, while the gateway runs',
  description: `Writes <destination>/arkvory-<time>/ holding database.jsonl (every table read in one database snapshot:
principals, key hashes, grants, repositories, catalog, rule documents, overrides, upload sessions; leases
the shared policy and the audit trail for the record only), rule-documents.json (with ARKVORY_REDIS_URL: the published
rate-limit rules kept in Redis), blobs/sha256/… (every blob that snapshot references, verified
by sha256 as it is copied) and manifest.json (counts, bytes, snapshot time, its own sha256), written last.
Runs beside a running writer; uploads published after the snapshot are not in it. Blobs already in an
earlier backup under <destination> are hard-linked once they hash to their name again (a damaged one is
copied afresh and named in the summary's damagedEarlier), as are the directory store's blobs when the
destination is on the same filesystem. An interrupted backup leaves no manifest; a later run removes it
(a run on this host at once when its process is gone, one on another host after it was idle for 24 h).
Uses ARKVORY_DATABASE_URL (or the embedded database of a running \`npm start\` on ARKVORY_DATA_DIR) and the
store of ARKVORY_DATA_DIR / ARKVORY_STORAGE_URL. Progress on stderr (a bar on a terminal, JSON lines
otherwise); a JSON summary on stdout. Exit codes: 0 done, 1 failed (nothing left under a backup's name),
2 usage, 3 done but its audit entry not recorded (audit_not_recorded on stderr). Refused while gc or scrub runs.`,
  forms: [
    form({
      args: '<destination>',
      options: {
        keep: {
          type: 'string',
          value: 'N',
          description:
            'afterwards keep only the newest N complete backups under <destination> (newest by completion order, recorded in each manifest, not by the clock in their names)',
        },
        'bytes-per-second': {
          type: 'string',
          value: 'N',
          description: 'pace reading blobs (default: as fast as the store serves them)',
        },
      },
      async run(input, env) {
        const destination = input.positionals[0]!;
        const keep = positiveInteger(input.string('keep'), 'keep');
        const rate = positiveInteger(input.string('bytes-per-second'), 'bytes-per-second', MAX_RATE_BYTES_PER_SEC);
        const config = await loadCliConfig(env);
        // Before anything is read: a destination that cannot be created fails at once (see prepareDataDir).
        try {
          await prepareDataDir(destination, '<destination>');
        } catch (err) {
          return failed('backup', err);
        }
        // The backup holds every repository's bytes: nothing of it readable by other accounts.
        restrictCreatedFileModes();
        // Named so that a refused gc or scrub can say a backup holds the barrier.
        const pool = await openCliPool(env, BACKUP_APPLICATION_NAME);
        const barrier = await pool.connect();
        try {
          // Shared like a gateway's: gc (which deletes unreferenced blobs) cannot run while blobs are copied.
          if (!(await tryLockShared(barrier, 'maintenance'))) {
            process.stderr.write(
              'arkvory backup: refused: gc or scrub is running on this database (it holds the maintenance barrier); try again when it is done\n',
            );
            return 1;
          }
          let store: ArtifactStore;
          try {
            store = await openStore(config, 'reader', pool);
          } catch (err) {
            return failed('backup', err);
          }
          const meter =
            rate === undefined
              ? undefined
              : new BandwidthGovernor({ rateBytesPerSec: rate, perPrincipalBytesPerSec: 0, clock: systemClock }).meter(
                  'backup',
                );
          const progress = progressReporter('backup');
          let redisRules: Awaited<ReturnType<typeof openRedisRuleDocuments>> | undefined;
          try {
            const rules = config.redisUrl ? await openRedisRuleDocuments(config) : undefined;
            redisRules = rules;
            const summary = await abortableBySignals((signal) =>
              runBackup({
                destination,
                pool,
                store,
                fsRoot: config.storage.url === undefined ? path.resolve(config.dataDir) : undefined,
                meter,
                signal,
                keep,
                nowMs: () => systemClock.wallMs(),
                onProgress: (done, total, bytes) => progress.update(progressText(done, total, bytes)),
                ruleDocuments: rules ? () => rules.readAll() : undefined,
              }),
            );
            progress.done();
            process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
            if (summary.damagedEarlier.length)
              process.stderr.write(
                `warning: ${summary.damagedEarlier.length} blob file(s) of earlier backups do not match their sha256 (${summary.damagedEarlier[0]}${summary.damagedEarlier.length > 1 ? ', …' : ''}); this backup copied them afresh: the earlier backups holding them are damaged (arkvory restore --verify)\n`,
              );
            if (summary.pruneError !== undefined)
              process.stderr.write(`warning: backup made; removing older backups failed: ${summary.pruneError}\n`);
            return await recordDone('backup', pool, {
              action: 'backup.create',
              target: { destination: path.resolve(destination) },
              details: { backup: summary.backup, snapshotTime: summary.snapshotTime, blobs: summary.blobs },
            });
          } catch (err) {
            progress.done();
            return failed('backup', err);
          } finally {
            redisRules?.close();
            await store.close();
          }
        } finally {
          barrier.release();
          await pool.end();
        }
      },
    }),
  ],
});

/** The restore target database: ARKVORY_DATABASE_URL, or the embedded one started here (refused while a gateway runs it). */
async function openRestoreDatabase(env: NodeJS.ProcessEnv): Promise<{ pool: pg.Pool; embedded?: EmbeddedDatabase }> {
  const config = await loadCliConfig(env);
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, pino.destination(2));
  let url = config.databaseUrl;
  let embedded: EmbeddedDatabase | undefined;
  if (!url) {
    // An orphan (its gateway or restore was killed) is not in use: starting the cluster stops it.
    const running = await embeddedDatabaseOwner(path.join(config.dataDir, '.pg'));
    if (running !== undefined)
      throw new BackupError(
        'target_busy',
        `a gateway is running the embedded database under ${config.dataDir} (pid ${running.owner}); stop it first (restore needs the target to itself)`,
      );
    await prepareDataDir(config.dataDir);
    embedded = await startEmbeddedDatabase(config.dataDir, log);
    url = embedded.url;
  }
  // Before the storage root is made and filled: like the gateway's, closed to other accounts.
  restrictCreatedFileModes();
  const pool = createPool(url, 3, log, 'arkvory-restore');
  try {
    // An occupied database is refused before it is migrated: restore writes nothing into it.
    await refuseOccupiedDatabase(pool);
  } catch (err) {
    await pool.end();
    await embedded?.stop();
    throw err;
  }
  try {
    await migrate(pool);
  } catch (err) {
    await pool.end();
    await embedded?.stop();
    throw new BackupError('target_busy', `cannot prepare the target database: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return embedded ? { pool, embedded } : { pool };
}

export const restoreCommand: Command = defineCommand({
  name: 'restore',
  summary:
    'restore a backup into an empty database and an empty storage root, then scrub it (--verify only checks a backup)',
  description: `<source> is a backup directory (holding manifest.json) or a destination of \`arkvory backup\` (its newest
complete backup is used, newest by completion order, not by the clock in its name).
Without --verify: reads and checks the backup first (manifest, schema version, database file, rule
documents): a refused one leaves the target untouched (its database not migrated, nor even connected
to). Then refuses unless the database (ARKVORY_DATABASE_URL, or the embedded one under
ARKVORY_DATA_DIR, started for the restore) holds no installation and the storage root (ARKVORY_DATA_DIR or
ARKVORY_STORAGE_URL) has no storage-id and no blobs (the root is claimed in one step: a hard link on the
directory store, MKCOL on nginx, a PUT with If-None-Match on S3, so of two restores into one root at once, or
two taking over one killed restore's root, the other is refused, target_busy), and the target Redis (ARKVORY_REDIS_URL) holds none of the
backed-up rule documents with other contents under its ARKVORY_REDIS_KEY_PREFIX, before it writes anything; migrates the database,
writes every blob through the store (each verified by hash), then in one transaction loads every table
(leases, the shared policy and the audit trail are not restored; unfinished multipart uploads come back aborted) and the
backed-up Redis rule documents (into the target's Redis, ARKVORY_REDIS_URL, or else its database), writes
the backup's storage-id last and commits; then scrubs what it restored. All or nothing: a restore that
fails or is stopped (SIGINT/SIGTERM) before the commit rolls back and removes every blob and the storage-id
it wrote, so the target is empty again and can be retried. A restore killed outright leaves the root's
storage-id marked as an unfinished restore: no gateway opens it, and the same restore run again takes it
over (its own mark replacing that one, exclusively) and empties it first. Refused while a gateway or worker of the database runs.
Progress on stderr (a bar on a terminal, JSON lines otherwise); a JSON summary on stdout.
Exit codes: 0 restored and clean, 1 refused, failed or the scrub found damage, 2 usage, 3 restored and
clean but its audit entry not recorded (audit_not_recorded on stderr), 4 restored and no damage found, but
the scrub left blobs unjudged (run arkvory scrub; outweighs 3).`,
  forms: [
    form({
      args: '<source>',
      options: {
        verify: {
          type: 'boolean',
          description:
            "check the backup without restoring: the manifest's own sha256, the database file's sha256 and the sha256 of every blob; needs no database or store. Exit 1 if anything is missing or corrupt.",
        },
      },
      async run(input, env) {
        const verify = input.boolean('verify');
        const source = path.resolve(input.positionals[0]!);
        const backup = await resolveBackup(source);
        if (!backup) {
          process.stderr.write(
            `arkvory restore: backup_invalid: ${source} holds no complete backup (no manifest.json; an interrupted backup never gets one)\n`,
          );
          return 1;
        }
        const progress = progressReporter(verify ? 'verify' : 'restore');
        if (verify) {
          try {
            const report = await verifyBackup(backup, (done, total, bytes) =>
              progress.update(progressText(done, total, bytes)),
            );
            progress.done();
            process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
            if (report.ok) return 0;
            process.stderr.write(
              `arkvory restore --verify: ${report.backup} is damaged: ${damageCounts(report)} (listed in the report on stdout); restore from another backup\n`,
            );
            return 1;
          } catch (err) {
            progress.done();
            return failed('restore --verify', err);
          }
        }
        const config = await loadCliConfig(env);
        const codeSchemaVersion = Math.max(0, ...(await listMigrations()).map((m) => m.version));
        // The backup first: a refused one (damaged, edited, of a newer schema) leaves the target as it
        // was, not even started, migrated or created.
        let checked: CheckedBackup;
        try {
          checked = await checkBackup(backup, codeSchemaVersion);
        } catch (err) {
          return failed('restore', err);
        }
        let opened: Awaited<ReturnType<typeof openRestoreDatabase>>;
        try {
          opened = await openRestoreDatabase(env);
        } catch (err) {
          return failed('restore', err);
        }
        const { pool, embedded } = opened;
        const barrier = await pool.connect();
        try {
          if (!(await tryLockExclusive(barrier, 'maintenance'))) {
            process.stderr.write(
              'arkvory restore: refused: a gateway or worker is running on the target database; stop it first\n',
            );
            return 1;
          }
          const summary = await abortableBySignals((signal) =>
            runRestore({
              backup,
              checked,
              pool,
              codeSchemaVersion,
              fsRoot: config.storage.url === undefined ? path.resolve(config.dataDir) : undefined,
              openTarget: (storageId) => openStore(config, 'writer', pool, { restoreAs: storageId }),
              onProgress: (done, total, bytes) => progress.update(progressText(done, total, bytes)),
              signal,
              occupiedRuleStore: config.redisUrl
                ? async (docs) => {
                    const target = await openRedisRuleDocuments(config);
                    try {
                      const held = await target.readAll();
                      const other = Object.keys(docs).filter(
                        (l) => l in held && JSON.stringify(held[l]) !== JSON.stringify(docs[l]),
                      );
                      if (!other.length) return undefined;
                      return `the target Redis ${redactRedisTarget(config.redisUrl!)} already holds rate-limit rule documents under the prefix ${JSON.stringify(config.redisKeyPrefix)} that differ from the backup's (${other.join(', ')}): another installation's, or rules published since the backup? Restore with an ARKVORY_REDIS_KEY_PREFIX that holds none, or remove those documents first`;
                    } finally {
                      target.close();
                    }
                  }
                : undefined,
              // Every restored blob's slice digests, so a remote store's slice cache needs no scrub first.
              sliceBytes: config.sliceCache.sliceBytes,
              // Into the target's rule store: its Redis when it has one, else the database (in the restore's transaction).
              writeRuleDocuments: async (docs, tx, undoWith) => {
                const restored = new Map(Object.entries(docs) as Array<[string, LimiterRules]>);
                if (!config.redisUrl) {
                  await upsertPgRuleDocuments(tx, restored);
                  return;
                }
                const redisRules = await openRedisRuleDocuments(config);
                try {
                  await redisRules.documents.update([...restored.keys()], (current) => {
                    // Known before the write is sent, which may land though its answer is lost
                    // (store_outcome_unknown): should the restore fail, the documents as they were (none, normally).
                    const previous = current;
                    undoWith(async () => {
                      const again = await openRedisRuleDocuments(config);
                      try {
                        await again.documents.remove([...restored.keys()].filter((l) => !previous.has(l)));
                        if (previous.size)
                          await again.documents.update(
                            [...previous.keys()],
                            () => previous as Map<string, LimiterRules>,
                          );
                      } finally {
                        again.close();
                      }
                    });
                    return restored;
                  });
                } finally {
                  redisRules.close();
                }
              },
            }),
          );
          progress.done();
          process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
          const recorded = await recordDone('restore', pool, {
            action: 'backup.restore',
            target: { source: backup },
            details: {
              backup: summary.backup,
              snapshotTime: summary.snapshotTime,
              storageId: summary.storageId,
              blobs: summary.blobs,
              corrupt: summary.scrub.corrupt.length,
              missing: summary.scrub.missing.length,
              // Blobs the closing scrub could not judge (exit 4): without them the entry of such a
              // restore read like a clean one's.
              unjudged: summary.scrub.unjudged.length,
            },
          });
          const code = restoreExitCode(summary.scrub, recorded);
          if (code === 1)
            process.stderr.write(
              `arkvory restore: restored, but its scrub found damage in the target store: ${damageCounts(summary.scrub)} (listed under "scrub" on stdout; corrupt ones quarantined); every blob was verified as it was written, so check the store\n`,
            );
          else if (code === EXIT_SCRUB_AGAIN)
            process.stderr.write(
              `arkvory restore: restored, but its scrub left ${summary.scrub.unjudged.length} blob(s) unjudged (listed under "scrub" on stdout, nothing moved): run arkvory scrub\n`,
            );
          return code;
        } catch (err) {
          progress.done();
          return failed('restore', err);
        } finally {
          barrier.release();
          await pool.end();
          await embedded?.stop();
        }
      },
    }),
  ],
});
