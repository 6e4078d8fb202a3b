/**
 * Per-second throughput samples for the console chart: a fixed-size ring buffer fed with the
 * governors' running totals of granted bytes. Pure: the caller passes the clock readings.
 * A sample's rate is the growth of a total since the previous reading divided by the time
 * between the two readings, so a late timer tick does not show as a spike.
 */

export interface Totals {
  readonly download: number;
  readonly upload: number;
}

export interface RateSample {
  /** Wall time of the reading that closed this interval (ms since the epoch). */
  readonly atMs: number;
  /** Bytes per second over the interval. */
  readonly download: number;
  readonly upload: number;
}

export class RateSamples {
  readonly #capacity: number;
  readonly #ring: RateSample[] = [];
  #next = 0;
  #last: { monotonicMs: number; totals: Totals } | undefined;

  /** `capacity` samples are kept (300 = five minutes of one-second samples). */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
    this.#capacity = capacity;
  }

  /**
   * Records a reading of the running totals. The first reading only sets the baseline; a reading
   * taken no later than the previous one, or with a total that went down (a reset), is a new
   * baseline too.
   */
  record(reading: { monotonicMs: number; wallMs: number; totals: Totals }): void {
    const last = this.#last;
    this.#last = { monotonicMs: reading.monotonicMs, totals: reading.totals };
    if (!last) return;
    const seconds = (reading.monotonicMs - last.monotonicMs) / 1000;
    const dDown = reading.totals.download - last.totals.download;
    const dUp = reading.totals.upload - last.totals.upload;
    if (seconds <= 0 || dDown < 0 || dUp < 0) return;
    const sample: RateSample = { atMs: reading.wallMs, download: dDown / seconds, upload: dUp / seconds };
    if (this.#ring.length < this.#capacity) this.#ring.push(sample);
    else this.#ring[this.#next] = sample;
    this.#next = (this.#next + 1) % this.#capacity;
  }

  /** The kept samples, oldest first. */
  samples(): RateSample[] {
    if (this.#ring.length < this.#capacity) return [...this.#ring];
    return [...this.#ring.slice(this.#next), ...this.#ring.slice(0, this.#next)];
  }
}
