/**
 * Time, injected. `wallMs` is calendar time (leases stored in PostgreSQL); `monotonicMs` never jumps
 * (in-process pacing and lease margins). Pure code takes `nowMs` arguments instead.
 */
export interface Clock {
  wallMs(): number;
  monotonicMs(): number;
}

export const systemClock: Clock = {
  wallMs: () => Date.now(),
  monotonicMs: () => performance.now(),
};

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  #wall: number;
  #mono: number;
  constructor(startWallMs = 1_700_000_000_000, startMonotonicMs = 0) {
    this.#wall = startWallMs;
    this.#mono = startMonotonicMs;
  }
  wallMs(): number {
    return this.#wall;
  }
  monotonicMs(): number {
    return this.#mono;
  }
  advance(ms: number): void {
    this.#wall += ms;
    this.#mono += ms;
  }
}
