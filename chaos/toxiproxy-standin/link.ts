/**
 * One direction of one proxied connection (the real `ToxicLink`): read from `source`, pass each
 * chunk through the toxics of that direction in order, write to `dest` with backpressure. Toxics
 * can be added, updated and removed while bytes flow. A toxic closing the link sends EOF on to the
 * toxics after it (so a later slow_close still delays), then the destination socket is closed.
 */
import type { Socket } from 'node:net';
import { ChunkQueue, EOF, type Chunk, type Item } from './chunk-queue.ts';
import { Signal, waitFor } from './signal.ts';
import { AttachedToxic, type LinkControl, type StreamDirection, type ToxicSpec } from './toxics.ts';

/** Bytes buffered per link before the source socket is paused (the real latency buffer is large). */
const HIGH_WATER_BYTES = 4 * 1024 * 1024;

interface Run {
  readonly aborted: Signal;
  current: AttachedToxic | null;
}

export interface LinkOptions {
  direction: StreamDirection;
  source: Socket;
  dest: Socket;
  toxics: readonly ToxicSpec[];
  /** Closes the destination (FIN, or RST when the connection resets on close). */
  closeDest(): void;
}

export class Link implements LinkControl {
  readonly direction: StreamDirection;
  readonly #source: Socket;
  readonly #dest: Socket;
  readonly #closeDest: () => void;
  readonly #queue = new ChunkQueue(HIGH_WATER_BYTES);
  readonly #attached: AttachedToxic[] = [];
  #run: Run = { aborted: new Signal(), current: null };
  /** undefined while open; the toxic that closed the link (null: closed from outside a toxic). */
  #closeAfter: AttachedToxic | null | undefined;
  /** The toxics up to and including the closer: the closing EOF starts after them. */
  #passedCloser = new Set<AttachedToxic>();
  #isDead = false;

  constructor(options: LinkOptions) {
    this.direction = options.direction;
    this.#source = options.source;
    this.#dest = options.dest;
    this.#closeDest = options.closeDest;
    for (const spec of options.toxics) this.#attached.push(new AttachedToxic(spec, this));
    this.#source.on('data', (data: Buffer) => {
      this.#queue.push({ data, readAtMs: performance.now() });
      if (this.#queue.isFull) this.#source.pause();
    });
    const eof = (): void => this.#queue.push(EOF);
    this.#source.on('end', eof);
    this.#source.on('close', eof);
  }

  get aborted(): Signal {
    return this.#run.aborted;
  }

  start(): void {
    this.#source.resume();
    void this.#pump().catch(() => this.kill());
  }

  addToxic(spec: ToxicSpec): void {
    if (this.#isDead) return;
    this.#attached.push(new AttachedToxic(spec, this));
  }

  updateToxic(spec: ToxicSpec): void {
    this.#attached.find((t) => t.spec.name === spec.name)?.update(spec);
  }

  removeToxic(name: string): void {
    const toxic = this.#attached.find((t) => t.spec.name === name);
    if (!toxic) return;
    toxic.detach();
    this.#attached.splice(this.#attached.indexOf(toxic), 1);
  }

  closeLink(from: AttachedToxic | null): void {
    if (this.#closeAfter !== undefined || this.#isDead) return;
    this.#closeAfter = from;
    this.#source.pause();
    const closerIndex = from ? this.#attached.indexOf(from) : this.#attached.length - 1;
    this.#passedCloser = new Set(closerIndex >= 0 ? this.#attached.slice(0, closerIndex + 1) : this.#attached);
    const current = this.#run.current;
    const currentIndex = current ? this.#attached.indexOf(current) : -1;
    // Data already past the closing toxic still goes out; data at or before it is dropped.
    if (currentIndex <= closerIndex) this.#run.aborted.fire();
  }

  /** The connection is gone: stop everything, write nothing more. */
  kill(): void {
    if (this.#isDead) return;
    this.#isDead = true;
    this.#run.aborted.fire();
    for (const toxic of this.#attached) toxic.dispose();
  }

  async #pump(): Promise<void> {
    for (;;) {
      if (this.#isDead) return;
      if (this.#closeAfter !== undefined) break;
      const run = this.#newRun();
      const item = this.#queue.shift();
      if (item === null) {
        await waitFor(null, [this.#queue.arrived, run.aborted]);
        continue;
      }
      if (this.#queue.isLow && this.#source.isPaused() && !this.#source.destroyed) this.#source.resume();
      await this.#process(item, new Set(), run);
      if (item === EOF && this.#closeAfter === undefined) return this.#finish();
    }
    await this.#process(EOF, this.#passedCloser, this.#newRun());
    this.#finish();
  }

  #newRun(): Run {
    this.#run = { aborted: new Signal(), current: null };
    if (this.#isDead) this.#run.aborted.fire();
    return this.#run;
  }

  async #process(item: Item, visited: Set<AttachedToxic>, run: Run): Promise<void> {
    for (;;) {
      if (run.aborted.fired) return;
      const next = this.#attached.find((t) => !visited.has(t));
      if (!next) {
        if (item !== EOF) await this.#write(item, run);
        return;
      }
      visited.add(next);
      if (!next.isActive) continue;
      run.current = next;
      const control: LinkControl = { aborted: run.aborted, closeLink: (from) => this.closeLink(from) };
      for await (const out of next.process(item, control)) {
        await this.#process(out, new Set(visited), run);
        run.current = next;
        if (run.aborted.fired) return;
      }
      return;
    }
  }

  async #write(chunk: Chunk, run: Run): Promise<void> {
    const dest = this.#dest;
    if (dest.destroyed || !dest.writable) return;
    if (dest.write(chunk.data)) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        dest.off('drain', done);
        dest.off('close', done);
        unsubscribe();
        resolve();
      };
      dest.on('drain', done);
      dest.on('close', done);
      const unsubscribe = run.aborted.subscribe(done);
    });
  }

  #finish(): void {
    if (this.#isDead) return;
    this.kill();
    this.#closeDest();
  }
}
