/**
 * SIGTERM/SIGINT for a serving process, the same in every role: the first signal asks for a
 * graceful stop (`onFirst`, then `stopped` resolves), a second one exits at once with status 1, for
 * an operator whose drain is taking too long.
 */
import type { Logger } from 'pino';

export interface StopSignals {
  /** Whether a stop was asked for. */
  readonly requested: boolean;
  /** Resolves at the first signal. */
  readonly stopped: Promise<void>;
}

export function watchStopSignals(log: Logger, onFirst: () => void): StopSignals {
  let count = 0;
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((resolve) => (resolveStopped = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    if (++count > 1) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    log.info({ signal }, 'shutting down');
    onFirst();
    resolveStopped();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return {
    get requested() {
      return count > 0;
    },
    stopped,
  };
}
