/**
 * The bounded FIFO between a socket reader and a link's pump. The reader pauses its socket when
 * the queue holds `highWaterBytes`; the pump resumes it below half of that (TCP backpressure).
 */
import { Signal } from './signal.ts';

export interface Chunk {
  data: Buffer;
  /** Monotonic time (performance.now()) the bytes were read, or left the previous latency toxic. */
  readAtMs: number;
}

export const EOF = Symbol('eof');
export type Item = Chunk | typeof EOF;

export class ChunkQueue {
  #items: Item[] = [];
  #bytes = 0;
  #ended = false;
  #arrived = new Signal();
  readonly highWaterBytes: number;

  constructor(highWaterBytes: number) {
    this.highWaterBytes = highWaterBytes;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get isFull(): boolean {
    return this.#bytes >= this.highWaterBytes;
  }

  get isLow(): boolean {
    return this.#bytes < this.highWaterBytes / 2;
  }

  push(item: Item): void {
    if (this.#ended) return;
    if (item === EOF) this.#ended = true;
    else this.#bytes += item.data.length;
    this.#items.push(item);
    this.#arrived.fire();
  }

  /** The next item, or null when there is none yet; `arrived` fires when one comes. */
  shift(): Item | null {
    const item = this.#items.shift();
    if (item === undefined) {
      if (this.#arrived.fired) this.#arrived = new Signal();
      return null;
    }
    if (item !== EOF) this.#bytes -= item.data.length;
    return item;
  }

  get arrived(): Signal {
    return this.#arrived;
  }
}
