/**
 * Pure: how long a queued job waits after its last attempt before it is claimed again. A first
 * attempt waits for nothing; each retry waits twice as long as the one before (with the default
 * 2 s: 2, 4, 8 and 16 s between the five attempts), so a passing failure of ours (a file table full,
 * a disk briefly gone) is ridden out instead of using up every attempt within milliseconds.
 */
export const DEFAULT_RETRY_DELAY_MS = 2000;
/** No wait is longer, whatever the attempts and base (a misconfigured base must not park a job for days). */
export const MAX_RETRY_DELAY_MS = 5 * 60_000;
/**
 * Doublings past which the wait is at its bound for any base of at least 1e-9 ms. The exponent stops
 * there: a store failure is waited out as long as its session lives (up to 30 days, ~8,600 attempts
 * at the bound), and PostgreSQL's power(2, n) overflows with an error past n = 1023, failing the
 * claim of every queued job.
 */
const MAX_DOUBLINGS = 60;

export function retryDelayMs(attempts: number, baseMs: number = DEFAULT_RETRY_DELAY_MS): number {
  if (attempts <= 0 || baseMs <= 0) return 0;
  return Math.min(baseMs * 2 ** Math.min(attempts - 1, MAX_DOUBLINGS), MAX_RETRY_DELAY_MS);
}

/**
 * The same wait in SQL, on the job's `attempts` and `updated_at` (when it was last queued again):
 * true once it has passed. `$base` is the parameter holding `baseMs`.
 */
export function retryDueSql(job: string, base: string): string {
  return `(${job}.attempts <= 0 OR ${base}::double precision <= 0 OR ${job}.updated_at <= now() - least(${base}::double precision * power(2, least(${job}.attempts - 1, ${MAX_DOUBLINGS})), ${MAX_RETRY_DELAY_MS}) * interval '1 millisecond')`;
}
