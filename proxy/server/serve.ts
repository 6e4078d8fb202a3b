/**
 * `arkvory serve`: reads the configuration, then loads only the module graph of the role it runs.
 * A router or rules service never imports the gateway's (routes, stores, PostgreSQL, Redis,
 * metrics): every module loaded stays in the heap for the life of the process, and a streaming
 * process runs a full garbage collection every few tens of MiB of socket buffers, each one as
 * dear as the heap is big.
 */
import { ConfigError, loadConfig, type Config } from '../config/config.ts';
import { readSecretFile } from '../config/secret-files.ts';
import type { StartSecrets } from '../config/secret-rotation.ts';
import type { Logger } from 'pino';
import type { WorkerInstance } from '../workers/worker-instance.ts';
import { createLogger } from './logger.ts';
import { EXIT, logStartupFailure, StartupError } from './startup-failure.ts';
import { trustOutboundCertificateAuthorities } from '../tls/outbound-ca.ts';
import {
  describeShortfall,
  descriptorLimit,
  planFrontDoor,
  RESERVED_DESCRIPTORS,
} from './front-door/descriptor-budget.ts';

export function loadConfigOrExit(env: NodeJS.ProcessEnv, readSecret?: (file: string) => string): Config {
  try {
    return loadConfig(env, undefined, readSecret);
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const line of err.problems) process.stderr.write(`arkvory: invalid configuration: ${line}\n`);
      process.exit(EXIT.config);
    }
    throw err;
  }
}

/** `arkvory serve`: runs until SIGTERM/SIGINT, then drains and resolves with the exit code. */
export async function serve(env: NodeJS.ProcessEnv): Promise<number> {
  // What each secret file held at start: a rotation compares against it (proxy/config/secret-rotation.ts).
  const reads = new Map<string, string>();
  const config = loadConfigOrExit(env, (file) => {
    const value = readSecretFile(file);
    reads.set(file, value);
    return value;
  });
  const secrets: StartSecrets = { env, reads };
  const log = createLogger(config.logLevel);
  if (config.outboundCaFile !== undefined) {
    try {
      const count = trustOutboundCertificateAuthorities(config.outboundCaFile);
      log.info({ file: config.outboundCaFile, certificates: count }, 'trusting extra CAs for outgoing TLS');
    } catch (err) {
      logStartupFailure(log, err);
      return EXIT.failure;
    }
  }
  const refused = await checkDescriptorBudget(config, log);
  if (refused !== undefined) return refused;
  // The router holds no lease, barrier or database state of its own (proxy/router/run-router.ts).
  if (config.role === 'router')
    return onWorkers(
      config,
      log,
      async () => (await import('../workers/run-router-primary.ts')).runRouterPrimary(config, log),
      async (serveLog, instance) =>
        (await import('../router/run-router.ts')).runRouter(config, serveLog, secrets, instance),
    );
  if (config.role === 'rules-service')
    return (await import('../rules-service/rules-service.ts')).runRulesService(config, log, secrets);
  return onWorkers(
    config,
    log,
    async () => (await import('../workers/run-primary.ts')).runPrimary(config, log),
    async (serveLog, instance) =>
      (await import('./serve-gateway.ts')).serveGateway(config, serveLog, secrets, instance),
  );
}

/**
 * The front door's bounds against this process's descriptor limit (front-door/descriptor-budget.ts),
 * before anything is opened: an ARKVORY_MAX_CONNECTIONS that cannot be honoured refuses the start
 * (exit 2, as any configuration that cannot work), since serving it would let clients take the
 * descriptors the gateway needs for its own work; a derived bound fits by construction, and is
 * warned about only when the limit is below even its floor. Logged by the process that is not one
 * of an instance's workers (they inherit its limit, and check for themselves without a word).
 */
async function checkDescriptorBudget(config: Config, log: Logger): Promise<number | undefined> {
  const isWorker = config.workers > 1 && !(await import('node:cluster')).default.isPrimary;
  const input = {
    limit: descriptorLimit(),
    configured: config.frontDoor.maxConnections,
    workers: config.workers,
    tls: config.tls !== undefined,
  };
  const plan = planFrontDoor(input);
  if (plan.verdict === 'too_high') {
    logStartupFailure(log, new StartupError(describeShortfall(plan, input)));
    return EXIT.config;
  }
  if (isWorker) return undefined;
  const fields = {
    maxConnections: plan.maxConnections,
    maxPendingHandshakes: plan.maxPendingHandshakes,
    descriptorLimit: plan.limitKnown ? plan.limit : 'unknown',
    descriptorsNeeded: plan.needed,
    reservedDescriptors: RESERVED_DESCRIPTORS,
    ...(config.workers > 1 ? { perWorker: true } : {}),
  };
  if (plan.verdict === 'short') log.warn({ code: 'descriptor_limit_low', ...fields }, describeShortfall(plan, input));
  else
    log.info(
      fields,
      `front door: ${plan.maxConnections} connections${plan.maxPendingHandshakes ? ` and ${plan.maxPendingHandshakes} TLS handshakes in progress` : ''}${config.workers > 1 ? ' per worker' : ''}, at most ${plan.needed} of ${plan.limitKnown ? plan.limit : `an assumed ${plan.limit}`} descriptors`,
    );
  return undefined;
}

/**
 * Runs `serveRole` as this process; with ARKVORY_WORKERS above 1, this process coordinates the
 * instance (`coordinate`) and each worker it forks runs `serveRole` (proxy/workers/).
 */
async function onWorkers(
  config: Config,
  log: Logger,
  coordinate: () => Promise<number>,
  serveRole: (log: Logger, instance?: WorkerInstance) => Promise<number>,
): Promise<number> {
  if (config.workers === 1) return serveRole(log);
  const cluster = (await import('node:cluster')).default;
  if (cluster.isPrimary) return coordinate();
  let instance: WorkerInstance;
  try {
    instance = await (await import('../workers/worker-instance.ts')).joinInstance();
  } catch (err) {
    // Its coordinating process did not answer (`coordinator_unanswered`): a failed start, exit 1.
    logStartupFailure(log, err);
    return EXIT.failure;
  }
  const code = await serveRole(log.child({ worker: instance.index }), instance);
  // Stopped: the IPC channel to the coordinating process would keep this worker alive until the
  // CLI's fallback exit 2 s later, and the instance's stop with it. Unreferenced, not closed: what
  // the link still writes goes out.
  process.channel?.unref();
  return code;
}
