/**
 * One-shot signals and a cancellable wait: the stand-in's replacement for Go's channels and
 * `select`. Listeners are removed when a wait ends, so long connections do not pile them up.
 */

export class Signal {
  #fired = false;
  #listeners = new Set<() => void>();

  get fired(): boolean {
    return this.#fired;
  }

  fire(): void {
    if (this.#fired) return;
    this.#fired = true;
    for (const listener of [...this.#listeners]) listener();
    this.#listeners.clear();
  }

  /** Calls `listener` once when fired (at once if already fired); returns the unsubscribe. */
  subscribe(listener: () => void): () => void {
    if (this.#fired) {
      queueMicrotask(listener);
      return () => {};
    }
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

/** Resolves `'elapsed'` after `ms` (never when `ms` is null), or with the first signal that fires. */
export function waitFor(ms: number | null, signals: readonly Signal[]): Promise<'elapsed' | Signal> {
  return new Promise((resolve) => {
    const unsubscribes: Array<() => void> = [];
    let timer: NodeJS.Timeout | undefined;
    const finish = (result: 'elapsed' | Signal): void => {
      if (timer) clearTimeout(timer);
      for (const unsubscribe of unsubscribes) unsubscribe();
      resolve(result);
    };
    for (const signal of signals) unsubscribes.push(signal.subscribe(() => finish(signal)));
    if (ms !== null) timer = setTimeout(() => finish('elapsed'), Math.max(0, ms));
  });
}
