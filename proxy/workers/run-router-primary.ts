/**
 * `arkvory serve` for a router with ARKVORY_WORKERS above 1: the coordinating process of one router
 * instance. A router keeps no state an instance must share (each worker discovers and probes the
 * gateways itself), so this process only checks the port and runs the workers (supervisor.ts).
 */
import type { Logger } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { systemClock } from '../../policy/clock.ts';
import type { Config } from '../config/config.ts';
import { checkPortFree } from '../server/startup-checks.ts';
import { EXIT, logStartupFailure } from '../server/startup-failure.ts';
import { WorkerSupervisor } from './supervisor.ts';

export async function runRouterPrimary(config: Config, log: Logger): Promise<number> {
  const supervisor = new WorkerSupervisor(config, log, systemClock);
  try {
    // The workers listen with SO_REUSEPORT, which would let them share the port with another instance.
    await checkPortFree(config.host, config.port);
  } catch (err) {
    logStartupFailure(log, err);
    return EXIT.failure;
  }
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return supervisor.run({ registry });
}
