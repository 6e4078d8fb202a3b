/**
 * Catalog cache coherence between the workers of one instance (ARKVORY_WORKERS above 1). Each
 * worker caches catalog rows and drops them at PostgreSQL's notification of a change, which does
 * not wait for anyone: a DELETE answered by one worker could still be served by another for as
 * long as that notification takes to arrive there (the name's old bytes, after a new publish).
 * So the worker that removed a row asks the coordinating process (`CATALOG_CHANGED`), which tells
 * every other worker to forget (`CATALOG_INVALIDATE`) and answers once they did, or once
 * `INVALIDATE_DEADLINE_MS` passed (a worker that cannot answer that long cannot poll its epoch
 * either, and stops trusting its cache by itself; lib/epoch-watcher.ts). Only then is the DELETE
 * answered.
 */
import type { Link } from './link.ts';

/** Worker → coordinating process: a catalog row was removed. */
export const CATALOG_CHANGED = 'catalog.changed';
/** Coordinating process → worker: drop the cached catalog rows now. */
export const CATALOG_INVALIDATE = 'catalog.invalidate';
export const INVALIDATE_DEADLINE_MS = 2000;

/** Tells every other serving worker's link to forget; resolves when all answered or gave up. */
export async function invalidateOthers(others: readonly Link[]): Promise<void> {
  await Promise.allSettled(
    others.map((link) => link.call(CATALOG_INVALIDATE, undefined, AbortSignal.timeout(INVALIDATE_DEADLINE_MS))),
  );
}
