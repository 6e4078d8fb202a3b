/**
 * How many workers serve an instance (ARKVORY_WORKERS, docs/architecture.md "Workers"): a number as
 * given (cross-checks.ts refuses one the role cannot run), or `auto`, like nginx's
 * `worker_processes auto`: one per core where the role runs on workers, else one process. The
 * default is 1: a gateway's per-request policy calls cross to the coordinating process, which makes
 * small requests dearer with workers (docs/deploy.md, "Workers").
 */
export type WorkersSetting = number | 'auto';

/** Whether `role` may run on several workers; the writer and readers need a database of their own. */
export function runsOnWorkers(role: string, hasDatabaseUrl: boolean): boolean {
  if (role === 'router') return true;
  return (role === 'api' || role === 'reader') && hasDatabaseUrl;
}

/**
 * The number of workers for `setting`; `cores` is what this process may use (`os.availableParallelism()`).
 * `auto` stays within an explicit connection bound (`maxConnections`), which the workers share.
 */
export function workerCount(
  setting: WorkersSetting,
  role: string,
  hasDatabaseUrl: boolean,
  cores: number,
  maxConnections?: number,
): number {
  if (setting !== 'auto') return setting;
  return runsOnWorkers(role, hasDatabaseUrl) ? Math.max(1, Math.min(256, cores, maxConnections ?? 256)) : 1;
}
