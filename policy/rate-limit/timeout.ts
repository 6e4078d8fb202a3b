import { RateLimitError } from './errors.ts';

/** Rejects with `store_timeout` when `promise` takes longer than `ms`; the late answer is ignored. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what = 'the rate-limit store'): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RateLimitError('store_timeout', `${what} did not answer within ${ms} ms`)), ms);
  });
  promise.catch(() => {});
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
