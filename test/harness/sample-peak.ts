/** Samples `probe` every `intervalMs` until `stop()`, which resolves with the largest value seen. */
export function samplePeak(probe: () => Promise<number>, intervalMs: number): { stop(): Promise<number> } {
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await probe());
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    async stop() {
      sampling = false;
      await sampler;
      return peak;
    },
  };
}
