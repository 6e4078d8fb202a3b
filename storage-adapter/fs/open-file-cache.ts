/**
 * Open descriptors of published blobs, kept for reuse (the idea of nginx's `open_file_cache`): a
 * hot blob costs no open/fstat/close per request. Blobs are content-addressed and immutable, so a
 * descriptor and the size read at open stay right for as long as the file is held; scrub and gc run
 * only while no gateway does, and a restarted gateway starts empty. An upload puts its verified bytes
 * in place of a blob file already there (damaged, or the same bytes): its own process forgets that
 * descriptor at once, the others when their periodic recheck finds the name leads to another file.
 *
 * Bounded by `maxEntries`; the least recently used entry is evicted first. A descriptor is closed
 * when it is evicted or idle for `idleMs` and no reader holds it; one still being read is closed
 * when its last reader releases it. Concurrent opens of one blob share one open.
 */
import type { FileHandle } from 'node:fs/promises';
import { BoundedLru } from '../../lib/bounded-lru.ts';
import type { CacheStats } from '../../lib/cache-stats.ts';
import type { MonotonicClock } from '../../lib/epoch-watcher.ts';

export interface OpenFile {
  readonly handle: FileHandle;
  readonly sizeBytes: number;
  /** Whether the name still leads to this file (false: replaced or removed; the descriptor is dropped). */
  readonly isCurrent?: (() => Promise<boolean>) | undefined;
}

interface Slot {
  readonly file: OpenFile;
  refs: number;
  lastUsedMs: number;
  /** No longer in the table: close when the last reader releases it. */
  evicted: boolean;
  closed: boolean;
}

export interface OpenFileLease {
  readonly file: OpenFile;
  /** Gives the descriptor back (it stays open for the next reader unless evicted). */
  release(): Promise<void>;
}

export interface OpenFileCacheOptions {
  readonly maxEntries: number;
  readonly idleMs: number;
  readonly clock: MonotonicClock;
}

export class OpenFileCache {
  readonly #slots: BoundedLru<string, Slot>;
  readonly #opening = new Map<string, Promise<Slot>>();
  readonly #options: OpenFileCacheOptions;
  readonly #closing = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #rechecking: Promise<void> | undefined;
  #hits = 0;
  #misses = 0;

  constructor(options: OpenFileCacheOptions) {
    this.#options = options;
    this.#slots = new BoundedLru<string, Slot>(
      { maxEntries: options.maxEntries, maxBytes: Number.POSITIVE_INFINITY },
      (_key, slot) => {
        slot.evicted = true;
        if (slot.refs === 0) this.#close(slot);
      },
    );
  }

  /** Starts the idle sweep and the recheck (every half idle period, at least once a second). */
  start(): void {
    this.#timer = setInterval(
      () => {
        this.sweep();
        void this.recheck();
      },
      Math.max(1000, this.#options.idleMs / 2),
    );
    this.#timer.unref();
  }

  /**
   * Drops every descriptor whose name leads to another file now (an upload in another process put
   * verified bytes in place of a damaged file; `forget` covers this process at once). Kept: an entry
   * whose check fails. One recheck runs at a time; a call during one waits for it.
   */
  recheck(): Promise<void> {
    this.#rechecking ??= (async () => {
      for (const [key, slot] of this.#slots.entries()) {
        const current = await slot.file.isCurrent?.().catch(() => true);
        if (current === false && this.#slots.peek(key) === slot) this.#slots.delete(key);
      }
    })().finally(() => {
      this.#rechecking = undefined;
    });
    return this.#rechecking;
  }

  /** Closes every idle descriptor unused for `idleMs` (run by the timer; tests call it with their clock). */
  sweep(): void {
    const now = this.#options.clock.monotonicMs();
    for (const [key, slot] of this.#slots.entries()) {
      if (slot.refs === 0 && now - slot.lastUsedMs >= this.#options.idleMs) this.#slots.delete(key);
    }
  }

  /**
   * Drops the descriptor of `key` (a file just put in its place under the name): the next reader
   * opens the new file; readers holding the old descriptor finish on it, and it closes after them.
   */
  forget(key: string): void {
    this.#slots.delete(key);
    // An open in flight may have reached the file the name led to before: its readers take it, the table does not.
    this.#opening.delete(key);
  }

  /** The open file for `key`, opening it with `open` on a miss. */
  async acquire(key: string, open: () => Promise<OpenFile>): Promise<OpenFileLease> {
    const cached = this.#slots.get(key);
    if (cached) {
      this.#hits++;
      return this.#lease(cached);
    }
    this.#misses++;
    const slot = await this.#open(key, open);
    // Evicted and closed between the open and this continuation: open again.
    if (slot.closed) return this.acquire(key, open);
    return this.#lease(slot);
  }

  #open(key: string, open: () => Promise<OpenFile>): Promise<Slot> {
    const pending = this.#opening.get(key);
    if (pending) return pending;
    const opening: Promise<Slot> = open().then((file) => {
      const fresh: Slot = {
        file,
        refs: 0,
        lastUsedMs: this.#options.clock.monotonicMs(),
        evicted: false,
        closed: false,
      };
      // Forgotten meanwhile, or (maxEntries 0) refused by the table: the slot lives for its readers only.
      const stale = this.#opening.get(key) !== opening;
      if (stale || !this.#slots.set(key, fresh, file.sizeBytes)) fresh.evicted = true;
      return fresh;
    });
    this.#opening.set(key, opening);
    const done = () => {
      if (this.#opening.get(key) === opening) this.#opening.delete(key);
    };
    opening.then(done, done);
    return opening;
  }

  #lease(held: Slot): OpenFileLease {
    held.refs++;
    held.lastUsedMs = this.#options.clock.monotonicMs();
    let released = false;
    return {
      file: held.file,
      release: async () => {
        if (released) return;
        released = true;
        held.refs--;
        held.lastUsedMs = this.#options.clock.monotonicMs();
        if (held.refs === 0 && held.evicted) await this.#close(held);
      },
    };
  }

  stats(): CacheStats {
    return {
      cache: 'open_file',
      hits: this.#hits,
      misses: this.#misses,
      entries: this.#slots.size,
      bytes: this.#slots.bytes,
    };
  }

  /** Closes every descriptor not in use and stops the sweep; held ones close on release. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#slots.clear();
    await Promise.all(this.#closing);
  }

  #close(slot: Slot): Promise<void> {
    if (slot.closed) return Promise.resolve();
    slot.closed = true;
    const closing = slot.file.handle.close().catch(() => {});
    this.#closing.add(closing);
    void closing.finally(() => this.#closing.delete(closing));
    return closing;
  }
}
