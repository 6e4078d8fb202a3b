/**
 * The store as the content routes use it, with its health in the loop: every open, existence check
 * and stage reports its outcome to `StoreHealth` (a failure only when it is the store's: it could not
 * be reached, did not answer, or an I/O error; `not_found` and client faults are successes here), and
 * while the store is unreachable those calls fail at once with 503 `store_unreachable` instead of
 * waiting out the storage timeouts. Blobs held in memory (`cachedBlob`) are still served.
 * A stage whose body failed (a `ClientBody` that the client cut, let time out or a check refused) or
 * whose caller gave up (its signal aborted) reports nothing: the store may then fail in any way
 * (a reset upstream PUT, an errno), and none of it says anything about the store.
 */
import { StorageError } from '../../storage-adapter/errors.ts';
import type { ArtifactStore, StageOptions } from '../../storage-adapter/store.ts';
import { ClientBody } from './client-body.ts';
import type { StoreHealth } from './store-health.ts';

/** Codes that say the store itself failed. */
const STORE_FAULTS = new Set(['upstream_unreachable', 'upstream_timeout', 'storage_mismatch']);
/** errno values of a store that went away under a call (a failed mount, a dead NFS server). */
const STORE_ERRNO = new Set(['EIO', 'ENOTCONN', 'ESTALE', 'ETIMEDOUT', 'EHOSTDOWN', 'ECONNREFUSED', 'ECONNRESET']);

/** The failure code a store call's error reports to the health, or undefined when the store did its job. */
export function storeFaultCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code !== 'string') return undefined;
  if (STORE_FAULTS.has(code)) return code;
  if (STORE_ERRNO.has(code)) return 'upstream_unreachable';
  return undefined;
}

function refusal(health: StoreHealth): StorageError {
  const last = health.snapshot().lastError;
  return new StorageError('store_unreachable', undefined, {
    headers: { 'retry-after': '2' },
    details: last ? { lastError: last.code } : {},
  });
}

export function trackStoreHealth<S extends ArtifactStore>(store: S, health: StoreHealth): S {
  const succeeded = <T>(result: T): T => {
    health.recordRequest(undefined);
    return result;
  };
  const failed = (err: unknown): never => {
    health.recordRequest(storeFaultCode(err));
    throw err;
  };
  // One `.then` per call (no async wrapper): these are on every read that is not served from memory.
  const track = <T>(call: () => Promise<T>, onFailure: (err: unknown) => never = failed): Promise<T> => {
    if (health.isUnreachable) return Promise.reject(refusal(health));
    try {
      return call().then(succeeded, onFailure);
    } catch (err) {
      return Promise.reject(err).catch(onFailure);
    }
  };
  const stageFailed =
    (body: AsyncIterable<Uint8Array>, options: StageOptions) =>
    (err: unknown): never => {
      if ((body instanceof ClientBody && body.failed) || options.signal?.aborted) throw err;
      return failed(err);
    };
  const wrapped: Partial<Record<PropertyKey, unknown>> = {
    openBlob: (sha256: string, ranges?: Parameters<ArtifactStore['openBlob']>[1]) =>
      track(() => store.openBlob(sha256, ranges)),
    hasBlob: (sha256: string) => track(() => store.hasBlob(sha256)),
    stage: (body: AsyncIterable<Uint8Array>, options: StageOptions) =>
      track(() => store.stage(body, options), stageFailed(body, options)),
  };
  // The same store with three calls wrapped; its other methods are bound to it once (a store may
  // keep #private fields, which a call through another `this` could not reach).
  return new Proxy(store, {
    get(target, key) {
      if (key in wrapped) return wrapped[key];
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      const bound = (value as (...args: unknown[]) => unknown).bind(target);
      wrapped[key] = bound;
      return bound;
    },
  });
}
