/**
 * SHA-256 of a large body on a worker thread, so the event loop that receives the body does not
 * also hash it: hashing is the largest single cost of a large upload on the main thread, while
 * another core is mostly idle when the file is written with direct I/O (overlapped-writer.ts).
 *
 * The bytes cross in shared memory, not in messages: each hasher owns a small ring of 1 MiB slots
 * in a SharedArrayBuffer; a full slot is posted by number and hashed in place, and the worker
 * answers when it is free again. One worker serves every hasher of the process, in order per
 * hasher. It is started on first use and unref'd, so it never keeps a process alive. A worker
 * that fails fails every hash in progress (the uploads end with an error and keep nothing); the
 * next hasher starts a new one.
 */
import { Worker } from 'node:worker_threads';
import { SLICE_HASHER_SOURCE } from '../slice-digests.ts';

const SLOT_BYTES = 1024 * 1024;
const SLOTS = 4;

/** The worker: one node:crypto hash per open hasher, updated from its shared slots in order. */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { createHash } = require('node:crypto');
${SLICE_HASHER_SOURCE}
const open = new Map();
parentPort.on('message', (m) => {
  if (m.op === 'open')
    open.set(m.id, {
      hash: createHash('sha256'),
      view: Buffer.from(m.shared),
      sliceBytes: m.sliceBytes,
      slice: m.sliceBytes ? createHash('sha256') : undefined,
      inSlice: 0,
      slices: [],
    });
  else if (m.op === 'update') {
    const h = open.get(m.id);
    if (!h) return;
    const bytes = h.view.subarray(m.offset, m.offset + m.length);
    h.hash.update(bytes);
    if (h.slice) sliceUpdate(h, bytes);
    parentPort.postMessage({ op: 'free', id: m.id, slot: m.slot });
  } else if (m.op === 'digest') {
    const h = open.get(m.id);
    if (!h) return;
    open.delete(m.id);
    const slices = h.slice ? sliceFinish(h) : undefined;
    parentPort.postMessage({ op: 'digest', id: m.id, hex: h.hash.digest('hex'), slices });
  } else if (m.op === 'drop') open.delete(m.id);
});
`;

interface Pending {
  readonly onFree: (slot: number) => void;
  readonly onDigest: (hex: string, slices: Uint8Array | undefined) => void;
  readonly onError: (err: Error) => void;
}

type WorkerMessage =
  | { op: 'free'; id: number; slot: number }
  | { op: 'digest'; id: number; hex: string; slices: Uint8Array | undefined };

class HashWorker {
  readonly #worker: Worker;
  readonly #hashers = new Map<number, Pending>();
  #failure: Error | undefined;

  constructor(onGone: () => void) {
    this.#worker = new Worker(WORKER_SOURCE, { eval: true });
    this.#worker.unref();
    this.#worker.on('message', (m: WorkerMessage) => {
      const h = this.#hashers.get(m.id);
      if (!h) return;
      if (m.op === 'free') h.onFree(m.slot);
      else {
        this.#forget(m.id);
        h.onDigest(m.hex, m.slices);
      }
    });
    const fail = (err: Error) => {
      if (this.#failure) return;
      this.#failure = new Error('the hashing worker stopped', { cause: err });
      onGone();
      for (const h of this.#hashers.values()) h.onError(this.#failure);
      this.#hashers.clear();
      this.#worker.unref();
    };
    this.#worker.on('error', fail);
    this.#worker.on('exit', (code) => fail(new Error(`exit code ${code}`)));
  }

  get failure(): Error | undefined {
    return this.#failure;
  }

  open(id: number, shared: SharedArrayBuffer, sliceBytes: number | undefined, pending: Pending): void {
    // Referenced while a hash is open: an upload awaiting its digest must keep the process alive.
    if (this.#hashers.size === 0) this.#worker.ref();
    this.#hashers.set(id, pending);
    this.#worker.postMessage({ op: 'open', id, shared, sliceBytes });
  }

  #forget(id: number): void {
    this.#hashers.delete(id);
    if (this.#hashers.size === 0) this.#worker.unref();
  }

  update(id: number, slot: number, offset: number, length: number): void {
    this.#worker.postMessage({ op: 'update', id, slot, offset, length });
  }

  digest(id: number): void {
    this.#worker.postMessage({ op: 'digest', id });
  }

  drop(id: number): void {
    if (!this.#hashers.has(id)) return;
    this.#forget(id);
    this.#worker.postMessage({ op: 'drop', id });
  }
}

let shared: HashWorker | undefined;
let nextId = 1;

function worker(): HashWorker {
  if (shared === undefined || shared.failure) {
    const created: HashWorker = new HashWorker(() => {
      if (shared === created) shared = undefined;
    });
    shared = created;
  }
  return shared;
}

/**
 * One body's SHA-256, computed on the worker, and with `sliceBytes` the sha256 of each slice of
 * that size too (slice-digests.ts). `update` may ask the caller to wait (the ring is full).
 */
export class OffThreadSha256 {
  readonly #id = nextId++;
  readonly #worker = worker();
  readonly #memory = new SharedArrayBuffer(SLOTS * SLOT_BYTES);
  readonly #view = Buffer.from(this.#memory);
  readonly #busy: boolean[] = new Array<boolean>(SLOTS).fill(false);
  #current = 0;
  #filled = 0;
  #waiter: (() => void) | undefined;
  #digest: ((hex: string) => void) | undefined;
  #failure: Error | undefined;
  #onFailure: ((err: Error) => void) | undefined;
  #slices: Buffer | undefined;

  constructor(options: { sliceBytes?: number | undefined } = {}) {
    this.#worker.open(this.#id, this.#memory, options.sliceBytes, {
      onFree: (slot) => {
        this.#busy[slot] = false;
        this.#wake();
      },
      onDigest: (hex, slices) => {
        if (slices) this.#slices = Buffer.from(slices.buffer, slices.byteOffset, slices.byteLength);
        this.#digest?.(hex);
      },
      onError: (err) => {
        this.#failure = err;
        this.#wake();
        this.#onFailure?.(err);
      },
    });
  }

  /** Copies `bytes` into the ring; a promise when a full slot must first be hashed (then await it). */
  update(bytes: Buffer): undefined | Promise<void> {
    let offset = 0;
    while (offset < bytes.length) {
      if (this.#failure) throw this.#failure;
      if (this.#busy[this.#current]) return this.#waitFor().then(() => this.update(bytes.subarray(offset)));
      const n = Math.min(SLOT_BYTES - this.#filled, bytes.length - offset);
      bytes.copy(this.#view, this.#current * SLOT_BYTES + this.#filled, offset, offset + n);
      this.#filled += n;
      offset += n;
      if (this.#filled === SLOT_BYTES) this.#post();
    }
    return undefined;
  }

  /** The hex digest of everything updated. */
  async digest(): Promise<string> {
    if (this.#filled > 0) {
      while (this.#busy[this.#current]) await this.#waitFor();
      this.#post();
    }
    if (this.#failure) throw this.#failure;
    return new Promise<string>((resolve, reject) => {
      this.#digest = resolve;
      this.#onFailure = reject;
      this.#worker.digest(this.#id);
    });
  }

  /** The slice digests (concatenated), once `digest()` resolved, when the hasher was opened with `sliceBytes`. */
  get sliceDigests(): Buffer | undefined {
    return this.#slices;
  }

  /** Forgets this body (an upload that failed): the worker drops its state. */
  abandon(): void {
    this.#worker.drop(this.#id);
  }

  #post(): void {
    const slot = this.#current;
    this.#busy[slot] = true;
    this.#worker.update(this.#id, slot, slot * SLOT_BYTES, this.#filled);
    this.#current = (slot + 1) % SLOTS;
    this.#filled = 0;
  }

  #waitFor(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#waiter = resolve;
    });
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }
}
