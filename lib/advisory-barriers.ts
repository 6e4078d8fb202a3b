/**
 * The keys of the session advisory locks that keep roles exclusive (policy/lease/barriers.ts takes
 * them), here so that a statement of another layer can take one too: the catalog's insert takes
 * the maintenance barrier shared for its own transaction (storage-adapter/catalog/catalog.ts).
 * Two-int4 form (class 'ARKV', object id): a separate lock space from the migration lock.
 */
export const BARRIER_LOCK_CLASS = 0x41524b56; // 'ARKV'

export const BARRIERS = {
  /** Exclusive: one writer per database. */
  writer: 1,
  /** Shared by every running gateway and worker; offline maintenance takes it exclusively. */
  maintenance: 2,
  /** Exclusive: one active completion worker per database. */
  worker: 3,
  /**
   * Shared by each worker of a writer instance (ARKVORY_WORKERS) while it may serve writes; a writer
   * starting takes it exclusively for an instant. The writer barrier is the coordinating process's,
   * on its own connection: were that session ended while the process stands still (SIGSTOP), its
   * workers would go on serving writes, and without this another writer could start beside them.
   */
  writerWorkers: 4,
} as const;
export type Barrier = keyof typeof BARRIERS;
