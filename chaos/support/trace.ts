/** `CHAOS_TRACE=1`: each scenario step goes to stderr with the ms since the file started (finds slow steps on a loaded machine). */
const startedMs = performance.now();

export function trace(step: string): void {
  if (process.env.CHAOS_TRACE === '1')
    process.stderr.write(`[chaos +${Math.round(performance.now() - startedMs)} ms] ${step}\n`);
}
