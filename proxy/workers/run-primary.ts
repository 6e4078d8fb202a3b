/**
 * `arkvory serve` for a writer or reader with ARKVORY_WORKERS above 1: the coordinating process of
 * one gateway instance. It checks the port and the data directory once, holds the instance's
 * standing (barriers, policy check, the shared profile's lease) and its policy state
 * (policy-host.ts) and the console's sessions (remote-sessions.ts), and runs the workers
 * (supervisor.ts; docs/architecture.md, "Workers").
 */
import { PgClient } from '../../lib/pg-client.ts';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { AdmissionQueue } from '../../policy/admission/index.ts';
import { createBandwidthGovernors } from '../../policy/bandwidth/index.ts';
import { systemClock } from '../../policy/clock.ts';
import type { Coordinator } from '../../policy/lease/coordinator.ts';
import { createMemoryCounterStore } from '../../policy/rate-limit/index.ts';
import { removeStrayLayout } from '../../storage-adapter/slice-cache/index.ts';
import type { Config } from '../config/config.ts';
import { admissionOptions, followLeasedShare, governorCeilings } from '../gates/transfers.ts';
import { registerAdmissionMetrics } from '../metrics/admission-metrics.ts';
import { registerBandwidthMetrics } from '../metrics/bandwidth-metrics.ts';
import { createGatewayMetrics } from '../metrics/gateway-metrics.ts';
import { registerLeaseMetrics } from '../metrics/lease-metrics.ts';
import { waitForDatabaseAtStartup } from '../server/database.ts';
import { openCoordinator } from '../server/lease-coordinator.ts';
import { CacheDirClaim, usesSliceCache } from '../server/cache-dir-claim.ts';
import { bounded, CLOSE_STEPS_MS } from '../server/close-steps.ts';
import { checkPortFree, prepareDataDir } from '../server/startup-checks.ts';
import { EXIT, logStartupFailure } from '../server/startup-failure.ts';
import { ConsoleSessions, consoleSessionOptions } from '../console/sessions.ts';
import { CallChecks } from './call-args.ts';
import { PolicyHost } from './policy-host.ts';
import { serveSessions } from './remote-sessions.ts';
import { WorkerSupervisor } from './supervisor.ts';

export async function runPrimary(config: Config, log: Logger): Promise<number> {
  // Held until every worker has stopped.
  const cacheDir = new CacheDirClaim();
  try {
    return await runInstance(config, log, cacheDir);
  } finally {
    await cacheDir.release();
  }
}

async function runInstance(config: Config, log: Logger, cacheDir: CacheDirClaim): Promise<number> {
  const clock = systemClock;
  const supervisor = new WorkerSupervisor(config, log, clock);
  let coordinator: Coordinator;
  try {
    await checkPortFree(config.host, config.port);
    await prepareDataDir(config.dataDir);
    // The instance's slice cache directory is this process's to hold, for its workers too. Each
    // worker keeps its part under its own w<index>/ (worker-layout.ts): what a single process or
    // more workers left there is nobody's, so it goes before any worker starts.
    await cacheDir.take(config);
    if (usesSliceCache(config))
      await removeStrayLayout(config.sliceCache.dir!, config.workers, log.child({ component: 'slice-cache' }));
    const databaseUrl = config.databaseUrl!;
    const reached = await waitForDatabaseAtStartup(
      async () => {
        const probe = new PgClient({ connectionString: databaseUrl, connectionTimeoutMillis: 10_000 });
        probe.on('error', () => {});
        try {
          await probe.connect();
        } finally {
          await probe.end().catch(() => {});
        }
      },
      { config, url: databaseUrl, log, signal: supervisor.stopSignal },
    );
    if (reached === 'stopped') return EXIT.ok;
    // The instance is one gateway: its writer barrier, policy check and slot lease are this
    // process's, held from start to stop; each worker takes only the maintenance barrier.
    coordinator = await openCoordinator(config, databaseUrl, log, 'instance');
  } catch (err) {
    logStartupFailure(log, err);
    return EXIT.failure;
  }
  const admission = new AdmissionQueue(admissionOptions(config));
  // As a single process's: the governors ask the lease before every grant and follow its share.
  const governors = createBandwidthGovernors(
    { clock, isPermitted: () => coordinator.isPermitted() },
    governorCeilings(config),
  );
  followLeasedShare(config, coordinator, governors);
  coordinator.onFenced(() => {
    governors.download.fence();
    governors.upload.fence();
  });
  // A worker's malformed call is refused and reported once per worker and op (call-args.ts).
  const checks = new CallChecks(log.child({ component: 'workers' }));
  const host = new PolicyHost({
    checks,
    admission,
    governors,
    lease: coordinator,
    ...(lendsSlots(config) ? { lendTo: config.workers } : {}),
    ...(config.redisUrl ? {} : { counters: createMemoryCounterStore() }),
  });
  // The console's sign-in sessions are the instance's (the writer serves the console).
  const sessions =
    config.role === 'api' ? new ConsoleSessions(consoleSessionOptions(clock, config.consoleIdleTimeoutMs)) : undefined;
  const registry = new Registry();
  createGatewayMetrics({ registry });
  registerLeaseMetrics(registry, coordinator);
  registerBandwidthMetrics(registry, governors);
  // What the workers hold unused is no transfer (slot-lending.ts): the host's snapshot leaves it out.
  registerAdmissionMetrics(registry, { snapshot: () => host.snapshot().admission }, (kind) => host.lentReady(kind));
  const code = await supervisor.run({
    registry,
    attach: (link) => {
      host.attach(link);
      if (sessions) serveSessions(link, sessions, checks);
    },
    detach: (link) => host.detach(link),
    closing: () => host.close(),
    describe: () => ({ heldSlotsLeft: host.heldSlots }),
  });
  // Its workers have stopped; the lease connection's close may wait on a database that never
  // answers (proxy/server/close-steps.ts).
  await bounded(coordinator.close(), CLOSE_STEPS_MS, 'the lease connection', log);
  return code;
}

/**
 * Whether the workers are lent admission slots (slot-lending.ts): not in the shared profile, where
 * only this process knows whether the slot lease still permits a grant, and not when no request may
 * wait, which a slot held unused by another worker would then refuse rather than delay.
 */
export function lendsSlots(config: Config): boolean {
  return !config.shared && config.admission.waitMs > 0 && config.admission.queueLength > 0;
}
