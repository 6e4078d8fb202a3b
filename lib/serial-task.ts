/**
 * Runs one piece of background work (the slice cache's sweep) one at a time: a run asked for while
 * one is in flight runs once more after it, a run that fails is tried again after `retryMs` (the
 * change it was asked for is not lost until the next one arrives), and `every` runs it at least
 * that often. Timers are injected; `close` stops everything and waits for the run in flight.
 */
export interface SerialTaskTimers {
  setTimeout(run: () => void, ms: number): { unref(): unknown };
  setInterval(run: () => void, ms: number): { unref(): unknown };
  clearInterval(timer: { unref(): unknown }): void;
}

export interface SerialTaskOptions {
  readonly run: () => Promise<void>;
  /** After a failed run: this long, then another. */
  readonly retryMs: number;
  /** Runs at least this often. */
  readonly everyMs: number;
  /** The first failure after a success (the rest stay quiet), and the first success after failures. */
  readonly onFailure: (err: unknown) => void;
  readonly onRecovery: () => void;
  readonly timers?: SerialTaskTimers;
}

export interface SerialTask {
  /** Asks for a run (joins the next one when one is in flight). */
  schedule(): void;
  close(): Promise<void>;
}

const systemTimers: SerialTaskTimers = {
  setTimeout: (run, ms) => setTimeout(run, ms),
  setInterval: (run, ms) => setInterval(run, ms),
  clearInterval: (timer) => clearInterval(timer as NodeJS.Timeout),
};

export function serialTask(options: SerialTaskOptions): SerialTask {
  const timers = options.timers ?? systemTimers;
  let running: Promise<void> | undefined;
  let again = false;
  let failing = false;
  let closed = false;
  const schedule = (): void => {
    if (closed) return;
    if (running) {
      again = true;
      return;
    }
    running = options
      .run()
      .then(
        () => {
          if (failing) options.onRecovery();
          failing = false;
        },
        (err: unknown) => {
          if (!failing) options.onFailure(err);
          failing = true;
          timers.setTimeout(schedule, options.retryMs).unref();
        },
      )
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          schedule();
        }
      });
  };
  const every = timers.setInterval(schedule, options.everyMs);
  every.unref();
  return {
    schedule,
    async close() {
      closed = true;
      timers.clearInterval(every);
      await running;
    },
  };
}
