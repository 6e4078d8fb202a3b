import type { LeaseStanding } from '../../policy/lease/coordinator.ts';

/** Whether this process can serve; `/health/status` answers 200 only in `serving`. */
export type LifecycleState = 'starting' | 'serving' | 'draining' | 'fenced';

export class Lifecycle {
  #state: LifecycleState = 'starting';
  #reason = 'starting';
  #listeners: Array<(state: LifecycleState) => void> = [];
  #permitted: (() => boolean) | undefined;
  #fenceReason = 'fenced';

  get state(): LifecycleState {
    this.#checkPermit();
    return this.#state;
  }

  get reason(): string {
    this.#checkPermit();
    return this.#reason;
  }

  get isServing(): boolean {
    return this.state === 'serving';
  }

  /**
   * Fenced with `standing`: when it says so, and at any read once its permit has lapsed, before its
   * expiry timer has run (late on a busy event loop; for up to a permit after a pause the monotonic
   * clock did not count but the wall clock did), so no request is admitted and no health check
   * answered 200 meanwhile.
   */
  follow(standing: Pick<LeaseStanding, 'isPermitted' | 'onFenced'>, reason: string): void {
    this.#fenceReason = reason;
    this.#permitted = () => standing.isPermitted();
    standing.onFenced(() => this.set('fenced', reason));
  }

  #checkPermit(): void {
    if (this.#state !== 'fenced' && this.#permitted !== undefined && !this.#permitted())
      this.set('fenced', this.#fenceReason);
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
