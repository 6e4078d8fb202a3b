/**
 * A Map used as an LRU bounded by entry count and by total weight (bytes). Re-inserting or reading
 * a key makes it the newest; inserting past either bound evicts the oldest entries first. An entry
 * heavier than the whole byte bound is not stored at all. Pure: no timers, no I/O.
 *
 * Reading the newest entry again moves nothing: a hot key read on every request (one principal's
 * key, one artifact) would otherwise delete and re-insert itself each time, and a Map that deletes
 * rehashes now and then (a visible share of a small request's garbage).
 */
export interface LruBounds {
  readonly maxEntries: number;
  readonly maxBytes: number;
}

export class BoundedLru<K, V> {
  readonly #map = new Map<K, { value: V; bytes: number }>();
  readonly #bounds: LruBounds;
  readonly #onEvict: ((key: K, value: V) => void) | undefined;
  #bytes = 0;
  /** The key last inserted or moved to the end: reading it again needs no move. */
  #newest: K | undefined;

  constructor(bounds: LruBounds, onEvict?: (key: K, value: V) => void) {
    this.#bounds = bounds;
    this.#onEvict = onEvict;
  }

  get size(): number {
    return this.#map.size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get(key: K): V | undefined {
    const slot = this.#map.get(key);
    if (slot === undefined) return undefined;
    // Stryker disable next-line ConditionalExpression: equivalent: moving the newest entry to the end leaves the order as it is
    if (key !== this.#newest) {
      this.#map.delete(key);
      this.#map.set(key, slot);
      this.#newest = key;
    }
    return slot.value;
  }

  /** Looks without refreshing the entry's age. */
  peek(key: K): V | undefined {
    return this.#map.get(key)?.value;
  }

  /** Stores the value; returns false (and stores nothing) when it alone exceeds a bound. */
  set(key: K, value: V, bytes: number): boolean {
    this.delete(key);
    if (bytes > this.#bounds.maxBytes || this.#bounds.maxEntries < 1) return false;
    this.#map.set(key, { value, bytes });
    this.#newest = key;
    this.#bytes += bytes;
    while (this.#map.size > this.#bounds.maxEntries || this.#bytes > this.#bounds.maxBytes) {
      const [oldestKey, oldest] = this.#map.entries().next().value!;
      this.#remove(oldestKey, oldest);
    }
    return true;
  }

  delete(key: K): boolean {
    const slot = this.#map.get(key);
    if (slot === undefined) return false;
    this.#remove(key, slot);
    return true;
  }

  clear(): void {
    for (const [key, slot] of [...this.#map]) this.#remove(key, slot);
  }

  /** Entries oldest first (for idle sweeps); safe to delete while iterating over the copy. */
  entries(): Array<[K, V]> {
    return [...this.#map].map(([key, slot]) => [key, slot.value]);
  }

  #remove(key: K, slot: { value: V; bytes: number }): void {
    this.#map.delete(key);
    // Only lets go of the key: a removed key comes back through set, which marks it newest again.
    // Stryker disable next-line ConditionalExpression,EqualityOperator: equivalent (see above)
    if (key === this.#newest) this.#newest = undefined;
    this.#bytes -= slot.bytes;
    this.#onEvict?.(key, slot.value);
  }
}
