/**
 * What the bandwidth governors hand to a transfer (structurally the same as policy/bandwidth's
 * meter; storage-adapter does not import policy). `take` resolves when `bytes` may pass.
 */
export interface ByteMeter {
  readonly quantumBytes: number;
  take(bytes: number, signal?: AbortSignal): Promise<void>;
  /** `take` without waiting: true when the bytes passed at once; false changes nothing (then `take`). */
  tryTake?(bytes: number): boolean;
  /** True while a take waits for its bytes: the gateway's pacing, not the client's silence. */
  readonly waiting?: boolean;
}
