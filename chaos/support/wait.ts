/** Waiting for a condition instead of sleeping blindly: polls every `intervalMs` until a deadline. */
import { setTimeout as sleep } from 'node:timers/promises';

export async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (performance.now() >= deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${options.what ?? 'a condition'}`);
    await sleep(options.intervalMs ?? 2);
  }
}
