/**
 * Pure: what an assembly failure does to its job. A failure of the store that passes (a full disk
 * freed, a store back up) is neither the upload's fault nor a reason to lose its parts: the job is
 * queued again, after the same growing waits as a failure of ours (retry-delay.ts), for as long as
 * the session has not expired (and at least for the attempts a failure of ours gets), its parts and
 * storage-quota hold kept. A failure of the upload (a part whose digest no longer matches, a part
 * gone, other bytes published under the name, a principal no longer allowed to publish:
 * completion-authority.ts) fails it at once, as before.
 */
import { CodedError } from '../../lib/coded-error.ts';

/**
 * The store's codes that say "not now" rather than "never": no room (blocks, inodes, an S3 quota),
 * no answer in time, no connection or a 5xx answer (upstream_unreachable), a failed store probe.
 */
const PASSING_STORE_CODES: ReadonlySet<string> = new Set([
  'storage_full',
  'upstream_timeout',
  'upstream_unreachable',
  'store_unreachable',
]);

/** `ours`: the worker's own fault; `store`: a store failure that passes; `upload`: the upload's own, final. */
export type AssemblyFailure = 'ours' | 'store' | 'upload';

export function classifyAssemblyFailure(err: unknown): AssemblyFailure {
  if (!(err instanceof CodedError) || err.code === 'unavailable') return 'ours';
  return PASSING_STORE_CODES.has(err.code) ? 'store' : 'upload';
}

/**
 * Whether a job whose attempt number `attempts` just failed is queued again. A failure of ours gets
 * `maxAttempts`; a passing store failure as many, and more while its session is unexpired (its
 * expiry bounds it: past it, the next such failure is final and the parts are removed).
 */
export function retriesAfter(
  failure: AssemblyFailure,
  attempts: number,
  maxAttempts: number,
  sessionExpired: boolean,
): boolean {
  if (failure === 'upload') return false;
  if (attempts < maxAttempts) return true;
  return failure === 'store' && !sessionExpired;
}
