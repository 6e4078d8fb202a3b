import { RateLimitError } from './errors.ts';

/** The error of a store that did not answer within `ms`. */
export function storeTimeout(ms: number, what = 'the rate-limit store'): RateLimitError {
  return new RateLimitError('store_timeout', `${what} did not answer within ${ms} ms`);
}

/** Rejects with `store_timeout` when `promise` takes longer than `ms`; the late answer is ignored. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what = 'the rate-limit store'): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(storeTimeout(ms, what)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}
