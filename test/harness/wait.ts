/** Waiting for a condition instead of sleeping blindly: polls every `intervalMs` until a deadline. */
import { setTimeout as sleep } from 'node:timers/promises';

/** What a wait may watch: it fails at once, with the logs, when this process exits first. */
export interface WatchedProcess {
  readonly name: string;
  readonly exited: Promise<number | string>;
  isRunning(): boolean;
  logs(): string;
}

export interface WaitOptions {
  /** Names the condition in the timeout error ("the writer to fence"). */
  what?: string;
  timeoutMs?: number;
  intervalMs?: number;
  /**
   * A throwing condition counts as "not yet" (a server not listening yet) instead of failing the
   * wait; the last error is named if the wait times out.
   */
  retryOnError?: boolean;
  /** Fail as soon as this process exits (its log tail in the error) instead of at the deadline. */
  process?: WatchedProcess;
}

const LOG_TAIL_CHARS = 4000;

export async function waitUntil(condition: () => boolean | Promise<boolean>, options: WaitOptions = {}): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const what = options.what ?? 'a condition';
  const watched = options.process;
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    if (watched && !watched.isRunning())
      throw new Error(
        `${watched.name} exited (${await watched.exited}) while waiting for ${what}:\n${watched.logs().slice(-LOG_TAIL_CHARS)}`,
      );
    try {
      if (await condition()) return;
    } catch (err) {
      if (!options.retryOnError) throw err;
      lastError = err;
    }
    if (performance.now() >= deadline) {
      const cause = lastError === undefined ? '' : ` (last error: ${String(lastError)})`;
      const logs = watched ? `:\n${watched.logs().slice(-LOG_TAIL_CHARS)}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}${logs}`);
    }
    await sleep(options.intervalMs ?? 50);
  }
}

/**
 * Waits until `url` answers with a status `isReady` accepts (200 unless given); refused or timed-out
 * requests count as "not yet". Fails at once when `options.process` exits.
 */
export async function waitForHttp(
  url: string,
  options: Omit<WaitOptions, 'retryOnError'> & {
    isReady?: (status: number) => boolean;
    headers?: Record<string, string>;
  } = {},
): Promise<void> {
  const { isReady = (status: number) => status === 200, headers = {}, ...wait } = options;
  await waitUntil(
    async () => {
      const res = await fetch(url, { headers, signal: AbortSignal.timeout(2000) });
      await res.body?.cancel(); // only the status matters; the body may be a whole artifact
      return isReady(res.status);
    },
    { what: `${url} to answer`, ...wait, retryOnError: true },
  );
}

/**
 * Rate-limit rules count in windows aligned to the epoch (a 60 s rule counts per wall-clock minute),
 * so a test that counts up to a limit must do it inside one window. When the current window of
 * `periodMs` has less than `neededMs` left, waits for the next one to begin; otherwise returns at once.
 */
export async function roomInWindow(periodMs: number, neededMs: number): Promise<void> {
  const left = periodMs - (Date.now() % periodMs);
  if (left < neededMs) await sleep(left + 50);
}
