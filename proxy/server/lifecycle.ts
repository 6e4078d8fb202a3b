/** Whether this process can serve; `/health/status` answers 200 only in `serving`. */
export type LifecycleState = 'starting' | 'serving' | 'draining' | 'fenced';

export class Lifecycle {
  #state: LifecycleState = 'starting';
  #reason = 'starting';
  #listeners: Array<(state: LifecycleState) => void> = [];

  get state(): LifecycleState {
    return this.#state;
  }

  get reason(): string {
    return this.#reason;
  }

  get isServing(): boolean {
    return this.#state === 'serving';
  }

  /** Fenced and draining are final: nothing moves a process back to serving. */
  set(state: LifecycleState, reason: string = state): void {
    if (this.#state === 'fenced' || (this.#state === 'draining' && state !== 'fenced')) return;
    this.#state = state;
    this.#reason = reason;
    for (const listener of this.#listeners) listener(state);
  }

  onChange(listener: (state: LifecycleState) => void): void {
    this.#listeners.push(listener);
  }
}
