/**
 * A value now, or a promise of it. The request path answers from memory most of the time (cached
 * keys and grants, counters in process memory); returning the value itself then skips a promise
 * and a microtask per step, which a small request notices. Callers branch with `isPromise`.
 */
export type MaybePromise<T> = T | Promise<T>;

export function isPromise<T>(value: MaybePromise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | undefined)?.then === 'function';
}
