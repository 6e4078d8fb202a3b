/**
 * How every role reports a refused start: one fatal log line with a stable code and one plain line
 * on stderr, so an operator reading either (or systemd's journal) sees why.
 */
import type { Logger } from 'pino';
import { GatewayError } from './errors.ts';

/**
 * Exit codes: 0 clean stop, 1 startup or runtime failure, 2 invalid configuration, 3 a worker of an
 * instance fenced by the loss of its own database connection (its coordinating process replaces it).
 */
export const EXIT = { ok: 0, failure: 1, config: 2, fenced: 3 } as const;

export class StartupError extends GatewayError {
  override readonly name = 'StartupError';
  declare readonly code: 'startup_refused';
  constructor(message: string, options?: { cause?: unknown }) {
    super('startup_refused', message, options);
  }
}

export function logStartupFailure(log: Logger, err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | undefined)?.code;
  log.fatal({ err, code: typeof code === 'string' ? code : 'startup_refused' }, `cannot start: ${message}`);
  process.stderr.write(`arkvory: cannot start: ${message}\n`);
}
