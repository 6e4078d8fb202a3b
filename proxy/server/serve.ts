/**
 * `arkvory serve`: reads the configuration, then loads only the module graph of the role it runs.
 * A router or rules service never imports the gateway's (routes, stores, PostgreSQL, Redis,
 * metrics): every module loaded stays in the heap for the life of the process, and a streaming
 * process runs a full garbage collection every few tens of MiB of socket buffers, each one as
 * dear as the heap is big.
 */
import { ConfigError, loadConfig, type Config } from '../config/config.ts';
import { createLogger } from './logger.ts';
import { EXIT } from './startup-failure.ts';

export function loadConfigOrExit(env: NodeJS.ProcessEnv): Config {
  try {
    return loadConfig(env);
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
  const config = loadConfigOrExit(env);
  const log = createLogger(config.logLevel);
  // The router holds no lease, barrier or database state of its own (proxy/router/run-router.ts).
  if (config.role === 'router') return (await import('../router/run-router.ts')).runRouter(config, log);
  if (config.role === 'rules-service')
    return (await import('../rules-service/rules-service.ts')).runRulesService(config, log);
  return (await import('./serve-gateway.ts')).serveGateway(config, log);
}
