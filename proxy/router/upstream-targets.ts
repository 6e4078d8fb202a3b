/**
 * The router's connection state per gateway URL (its parsed address and undici pool), made on a
 * gateway's first request. Gateways come and go under lease discovery (a new address per restart
 * in Kubernetes), so state of a URL that left the pool is closed once a new URL is seen: what is
 * kept stays bounded by the pool, never by every gateway ever seen.
 */
export interface ClosableTarget {
  /** Lets requests in flight finish, then closes the connections (undici `Pool.close`). */
  close(): Promise<unknown>;
}

export interface UpstreamTargets<T extends ClosableTarget> {
  of(url: string): T;
  /** The URLs with state now (for tests and introspection). */
  urls(): string[];
  /** Every target's connections, at once. */
  destroyAll(destroy: (target: T) => void): void;
}

export function createUpstreamTargets<T extends ClosableTarget>(
  isPooled: (url: string) => boolean,
  make: (url: string) => T,
): UpstreamTargets<T> {
  const targets = new Map<string, T>();
  return {
    of(url) {
      let target = targets.get(url);
      if (target) return target;
      for (const [known, old] of targets) {
        if (isPooled(known)) continue;
        targets.delete(known);
        void old.close().catch(() => {});
      }
      target = make(url);
      targets.set(url, target);
      return target;
    },
    urls: () => [...targets.keys()],
    destroyAll(destroy) {
      for (const target of targets.values()) destroy(target);
      targets.clear();
    },
  };
}
