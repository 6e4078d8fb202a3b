/**
 * Two restores racing for one root in one test process: each must find the root empty before either
 * claims it. A restore's mark bears its process's pid, so a second restore of the same process that
 * read the first's claim would take it for a stopped restore's and take the root over (two restore
 * processes never do: the other's pid is alive). Holding each restore's first identity read until
 * both have read gives the race its instant.
 */
import type { OpenedArtifactStore } from '../../storage-adapter/store.ts';

/** `store` whose first identity read, once it has read (`onRead`), waits for `gate` before it answers. */
export function heldFirstRead(
  store: OpenedArtifactStore,
  gate: Promise<void>,
  onRead?: () => void,
): OpenedArtifactStore {
  let first = true;
  const identity = {
    ...store.identity,
    read: async () => {
      const text = await store.identity.read();
      if (first) {
        first = false;
        onRead?.();
        await gate;
      }
      return text;
    },
  };
  return new Proxy(store, { get: (t, p) => (p === 'identity' ? identity : Reflect.get(t, p)) });
}
