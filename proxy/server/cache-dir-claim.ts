/**
 * A gateway instance's hold on its slice cache directory (storage-adapter/slice-cache/directory-lock.ts),
 * taken at start before anything there is touched and kept until the instance stops. The single
 * process, or the coordinating process of several workers, takes it, once no worker of an earlier
 * instance is left; each worker joins it for its life, so workers left draining by a killed
 * coordinating process still count.
 */
import { mkdir, readdir } from 'node:fs/promises';
import {
  foreignEntries,
  joinDirectory,
  lockDirectory,
  noWorkersLeft,
} from '../../storage-adapter/slice-cache/index.ts';
import type { Config } from '../config/config.ts';
import { StartupCheckError } from './startup-checks.ts';

/** The slice cache is used: a directory is set and the store is remote (the directory store needs none). */
export function usesSliceCache(config: Pick<Config, 'sliceCache' | 'storage'>): boolean {
  return config.sliceCache.dir !== undefined && config.storage.url !== undefined;
}

export class CacheDirClaim {
  #release: (() => Promise<void>) | undefined;

  /**
   * Takes the directory when this configuration uses one; throws `cache_dir_in_use`, naming the
   * holder, when another instance has it, and `cache_dir_not_a_cache` when it holds other things.
   */
  async take(config: Pick<Config, 'sliceCache' | 'storage'>): Promise<void> {
    if (!usesSliceCache(config)) return;
    const dir = config.sliceCache.dir!;
    // Before anything is made there: a start empties tmp/ and removes what its layout does not use.
    const names = await readdir(dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [];
      throw err;
    });
    const foreign = foreignEntries(names);
    if (foreign.length > 0) {
      const shown = foreign.slice(0, 5).join(', ') + (foreign.length > 5 ? ', …' : '');
      throw new StartupCheckError(
        'cache_dir_not_a_cache',
        `ARKVORY_CACHE_DIR=${dir} holds ${shown} and nothing of a slice cache; a cache empties its tmp/ and removes the parts of its directory it does not use when it starts, so it takes only an empty directory or its own: give it one of its own. Nothing there was touched.`,
      );
    }
    await mkdir(dir, { recursive: true });
    const lock = await lockDirectory(dir);
    if (!lock.held) {
      const by = lock.holder
        ? `process ${lock.holder.pid} on ${lock.holder.host}, since ${lock.holder.since}`
        : 'a process that has not named itself yet';
      throw new StartupCheckError(
        'cache_dir_in_use',
        `ARKVORY_CACHE_DIR=${dir} is held by another gateway instance (${by}); two instances must never share one, as each bounds, evicts and clears only its own slices: give this one its own directory. Nothing there was touched.`,
      );
    }
    this.#release = lock.release;
    if (!(await noWorkersLeft(dir))) {
      await this.release();
      throw new StartupCheckError(
        'cache_dir_in_use',
        `ARKVORY_CACHE_DIR=${dir} is still used by the workers of a gateway instance whose coordinating process is gone; they stop on their own within its ARKVORY_SHUTDOWN_TIMEOUT_SECONDS: start this one again then. Nothing there was touched.`,
      );
    }
  }

  /** A worker's share of its instance's directory, which its coordinating process holds. */
  async join(config: Pick<Config, 'sliceCache' | 'storage'>): Promise<void> {
    if (!usesSliceCache(config)) return;
    const share = await joinDirectory(config.sliceCache.dir!);
    this.#release = async () => share.release();
  }

  async release(): Promise<void> {
    const release = this.#release;
    this.#release = undefined;
    await release?.();
  }
}
