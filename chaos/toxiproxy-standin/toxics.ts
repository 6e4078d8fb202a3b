/**
 * The toxics the stand-in knows, with the semantics of Shopify/toxiproxy v2 `toxics/*.go`:
 * - latency: each chunk leaves `latency ± jitter` ms after it was read (pipelined, not cumulative);
 * - bandwidth: `rate` KB/s (1 KB = 1000 bytes), large chunks split into 100 ms slices;
 * - timeout: data is dropped; the link closes `timeout` ms after the toxic started or last dropped
 *   data (0 = never), at once on EOF, and when the toxic is removed (the real `Cleanup`);
 * - reset_peer: on the first data (or EOF) wait `timeout` ms, then close the link; the sockets are
 *   reset (RST) when the toxic existed when the connection opened (real: SO_LINGER 0 at link start);
 * - slow_close: data flows, the close waits `delay` ms;
 * - limit_data: `bytes` pass, then the link closes.
 * Toxicity is rolled per connection when the toxic is attached, and again on every update.
 */
import { EOF, type Chunk, type Item } from './chunk-queue.ts';
import { Signal, waitFor } from './signal.ts';

export const TOXIC_ATTRIBUTES = {
  latency: ['latency', 'jitter'],
  bandwidth: ['rate'],
  timeout: ['timeout'],
  reset_peer: ['timeout'],
  slow_close: ['delay'],
  limit_data: ['bytes'],
} as const satisfies Record<string, readonly string[]>;

export type ToxicType = keyof typeof TOXIC_ATTRIBUTES;
export type StreamDirection = 'upstream' | 'downstream';

export function isToxicType(value: string): value is ToxicType {
  return Object.hasOwn(TOXIC_ATTRIBUTES, value);
}

/** A toxic as the API shows it (field order as the real server marshals it). */
export interface ToxicSpec {
  attributes: Record<string, number>;
  name: string;
  type: ToxicType;
  stream: StreamDirection;
  toxicity: number;
}

/** What a toxic may do to the link it is attached to. */
export interface LinkControl {
  /** Fires when the item being processed must be dropped (the link is closing or dead). */
  readonly aborted: Signal;
  /** The real `stub.Close()`: stop reading, send EOF on past this toxic, then close the socket. */
  closeLink(from: AttachedToxic): void;
}

/** One toxic on one link (one direction of one connection): the real `ToxicStub`. */
export class AttachedToxic {
  spec: ToxicSpec;
  isActive = false;
  isDetached = false;
  /** limit_data: bytes passed on this link; survives updates, as the real per-stub state does. */
  transmittedBytes = 0;
  /** bandwidth: the sleep owed; reset when the toxic is interrupted, as a re-run Pipe starts at 0. */
  bandwidthDebtMs = 0;
  timer: NodeJS.Timeout | undefined;
  #interrupt = new Signal();
  readonly #link: LinkControl;

  constructor(spec: ToxicSpec, link: LinkControl) {
    this.spec = spec;
    this.#link = link;
    this.#roll();
    BEHAVIOURS[spec.type].attach?.(this, link);
  }

  /** Fires on the next update or removal (the real `stub.Interrupt`). */
  get interrupted(): Signal {
    return this.#interrupt;
  }

  update(spec: ToxicSpec): void {
    this.spec = spec;
    this.#roll();
    this.#fireInterrupt();
    BEHAVIOURS[spec.type].attach?.(this, this.#link);
  }

  detach(): void {
    BEHAVIOURS[this.spec.type].detach?.(this, this.#link);
    this.isDetached = true;
    this.#clearTimer();
    this.#fireInterrupt();
  }

  /** Stops timers when the connection dies. */
  dispose(): void {
    this.#clearTimer();
  }

  process(item: Item, link: LinkControl): AsyncGenerator<Item, void> {
    return BEHAVIOURS[this.spec.type].pass(this, item, link);
  }

  #roll(): void {
    this.isActive = Math.random() < this.spec.toxicity;
  }

  #fireInterrupt(): void {
    const fired = this.#interrupt;
    this.#interrupt = new Signal();
    this.bandwidthDebtMs = 0;
    fired.fire();
  }

  #clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

interface Behaviour {
  /** Called when the toxic is attached to a link and on every update. */
  attach?(toxic: AttachedToxic, link: LinkControl): void;
  /** Called when the toxic is removed, while it is still in the chain. */
  detach?(toxic: AttachedToxic, link: LinkControl): void;
  /** Yields what goes on down the chain; yields nothing to drop the item. */
  pass(toxic: AttachedToxic, item: Item, link: LinkControl): AsyncGenerator<Item, void>;
}

function restartTimeoutTimer(toxic: AttachedToxic, link: LinkControl): void {
  if (toxic.timer) clearTimeout(toxic.timer);
  toxic.timer = undefined;
  const timeoutMs = attr(toxic, 'timeout');
  if (toxic.isActive && timeoutMs > 0) toxic.timer = setTimeout(() => link.closeLink(toxic), timeoutMs);
}

function attr(toxic: AttachedToxic, name: string): number {
  return toxic.spec.attributes[name] ?? 0;
}

function randomJitterMs(jitter: number): number {
  return jitter > 0 ? Math.floor(Math.random() * jitter * 2) - jitter : 0;
}

const BEHAVIOURS: Record<ToxicType, Behaviour> = {
  latency: {
    async *pass(toxic, item, link) {
      if (item === EOF) return yield item;
      const delayMs = attr(toxic, 'latency') + randomJitterMs(attr(toxic, 'jitter'));
      const sleepMs = delayMs - (performance.now() - item.readAtMs);
      if (sleepMs > 0) {
        const woke = await waitFor(sleepMs, [toxic.interrupted, link.aborted]);
        if (woke === link.aborted) return;
        if (woke === 'elapsed') item.readAtMs += sleepMs;
      }
      yield item;
    },
  },

  bandwidth: {
    async *pass(toxic, item, link) {
      if (item === EOF) return yield item;
      const ratePerMs = attr(toxic, 'rate');
      if (ratePerMs <= 0) {
        toxic.bandwidthDebtMs = 0;
        return yield item;
      }
      const interrupt = toxic.interrupted;
      let rest: Chunk = item;
      toxic.bandwidthDebtMs += rest.data.length / ratePerMs;
      const sliceBytes = ratePerMs * 100;
      while (rest.data.length > sliceBytes) {
        const woke = await waitFor(100, [interrupt, link.aborted]);
        if (woke === link.aborted) return;
        if (woke === interrupt) return yield rest;
        yield { data: rest.data.subarray(0, sliceBytes), readAtMs: rest.readAtMs };
        rest = { data: rest.data.subarray(sliceBytes), readAtMs: rest.readAtMs };
        toxic.bandwidthDebtMs -= 100;
      }
      const startedMs = performance.now();
      const woke = await waitFor(toxic.bandwidthDebtMs, [interrupt, link.aborted]);
      if (woke === link.aborted) return;
      if (woke === 'elapsed') toxic.bandwidthDebtMs -= performance.now() - startedMs;
      yield rest;
    },
  },

  timeout: {
    attach: restartTimeoutTimer,
    detach(toxic, link) {
      // Removing a timeout toxic closes the connections it held (toxics/timeout.go Cleanup).
      if (toxic.isActive) link.closeLink(toxic);
    },
    async *pass(toxic, item, link) {
      if (item === EOF) return link.closeLink(toxic);
      restartTimeoutTimer(toxic, link); // the real select arms a fresh timer after each chunk
    },
  },

  reset_peer: {
    async *pass(toxic, _item, link) {
      // The real toxic does not listen to interrupts while it waits.
      const woke = await waitFor(attr(toxic, 'timeout'), [link.aborted]);
      if (woke === 'elapsed') link.closeLink(toxic);
    },
  },

  slow_close: {
    async *pass(toxic, item, link) {
      if (item !== EOF) return yield item;
      for (;;) {
        const woke = await waitFor(attr(toxic, 'delay'), [toxic.interrupted, link.aborted]);
        if (woke === link.aborted) return;
        if (woke === 'elapsed' || toxic.isDetached || !toxic.isActive) return yield item;
      }
    },
  },

  limit_data: {
    async *pass(toxic, item, link) {
      if (item === EOF) return yield item;
      const limitBytes = attr(toxic, 'bytes');
      const remainingBytes = Math.max(0, limitBytes - toxic.transmittedBytes);
      const data = item.data.length > remainingBytes ? item.data.subarray(0, remainingBytes) : item.data;
      if (data.length > 0) {
        toxic.transmittedBytes += data.length;
        yield { data, readAtMs: item.readAtMs };
      }
      if (limitBytes - toxic.transmittedBytes <= 0) link.closeLink(toxic);
    },
  },
};
