/**
 * The Node options a worker process starts with: the coordinating process's own, and, when the
 * workers take every core the instance may use, `--single-threaded-gc`.
 *
 * Why: V8 collects each process's garbage with helper threads (parallel scavenges, concurrent
 * marking and sweeping), which pay off on an idle core. Workers that fill the cores leave none, so
 * the helpers only take CPU from the other workers (and from PostgreSQL or Redis on the host) and
 * add their synchronisation to every collection. Measured in docs/results/tls.md ("single-threaded
 * collector"). Node refuses the option in NODE_OPTIONS; the cluster passes `execArgv` on the
 * worker's command line, where it is taken.
 */

/** The flag added, and the options that show the operator chose the collector's threads already. */
export const SINGLE_THREADED_GC = '--single-threaded-gc';
const COLLECTOR_THREAD_OPTIONS =
  /^--(no-)?(single-threaded-gc|single-threaded|parallel-scavenge|concurrent-marking)(=|$)/;

/**
 * `parent`: the coordinating process's `process.execArgv`; `workers`: how many it runs; `cores`:
 * `os.availableParallelism()` (CPU affinity and cgroup quota). An option the operator gave about the
 * collector's threads is left as it is.
 */
export function workerExecArgv(parent: readonly string[], workers: number, cores: number): string[] {
  const argv = [...parent];
  if (workers < cores || argv.some((option) => COLLECTOR_THREAD_OPTIONS.test(option))) return argv;
  argv.push(SINGLE_THREADED_GC);
  return argv;
}
