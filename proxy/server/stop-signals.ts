/**
 * SIGTERM/SIGINT for a serving process, the same in every role: the first signal asks for a
 * graceful stop (`onFirst`, then `stopped` resolves), a second one exits at once with status 1, for
 * an operator whose drain is taking too long. Signals within REPEAT_WINDOW_MS of the first are the
 * same request delivered twice: Ctrl-C under `npm start` reaches the gateway from the terminal
 * (its process group) and again from npm, which forwards it.
 */
import type { Logger } from 'pino';

/** A repeat this soon after the first signal is the same stop request (see above). */
export const REPEAT_WINDOW_MS = 1000;

/** Pure: what a signal at `nowMs` asks for, given when the first one came (undefined: none yet). */
export function signalMeaning(firstAtMs: number | undefined, nowMs: number): 'stop' | 'repeat' | 'exit' {
  if (firstAtMs === undefined) return 'stop';
  return nowMs - firstAtMs < REPEAT_WINDOW_MS ? 'repeat' : 'exit';
}

export interface StopSignals {
  /** Whether a stop was asked for. */
  readonly requested: boolean;
  /** Resolves at the first signal. */
  readonly stopped: Promise<void>;
}

export function watchStopSignals(log: Logger, onFirst: () => void): StopSignals {
  let count = 0;
  let firstAtMs = 0;
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((resolve) => (resolveStopped = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    const now = performance.now();
    const meaning = signalMeaning(count > 0 ? firstAtMs : undefined, now);
    if (meaning === 'repeat') {
      log.debug({ signal }, 'the same stop request again; still draining');
      return;
    }
    if (meaning === 'stop') firstAtMs = now;
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
