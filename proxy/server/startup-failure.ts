/**
 * How every role reports a refused start: one fatal log line with a stable code and one plain line
 * on stderr, so an operator reading either (or systemd's journal) sees why.
 */
import type { Logger } from 'pino';

export function logStartupFailure(log: Logger, err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | undefined)?.code;
  log.fatal({ err, code: typeof code === 'string' ? code : 'startup_refused' }, `cannot start: ${message}`);
  process.stderr.write(`arkvory: cannot start: ${message}\n`);
}
