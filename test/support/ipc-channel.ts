/**
 * Two ends of an in-memory channel between a worker and its coordinating process, delivered as IPC
 * does (a copy, on a later turn of the event loop), for tests of proxy/workers/link.ts and what runs
 * over it. `writes` records each end's channel writes; while `stop()`ped (the coordinating process
 * stopped or deaf), what the worker sends waits in the pipe, and `resume()` delivers it in order.
 */
import { EventEmitter } from 'node:events';
import type { Channel } from '../../proxy/workers/link.ts';

export interface ChannelPair {
  readonly worker: Channel;
  readonly primary: Channel;
  readonly writes: { readonly worker: unknown[]; readonly primary: unknown[] };
  stop(): void;
  resume(): void;
}

export function channelPair(): ChannelPair {
  const workerSide = new EventEmitter();
  const primarySide = new EventEmitter();
  const writes = { worker: [] as unknown[], primary: [] as unknown[] };
  const pipe: unknown[] = [];
  let stopped = false;
  const end = (self: EventEmitter, other: EventEmitter, written: unknown[], held: boolean): Channel => ({
    send(message, callback) {
      written.push(message);
      const copy = structuredClone(message);
      if (held && stopped) pipe.push(copy);
      else setImmediate(() => other.emit('message', copy));
      callback(null);
      return true;
    },
    on(event, listener) {
      self.on(event, listener);
      return self;
    },
  });
  return {
    worker: end(workerSide, primarySide, writes.worker, true),
    primary: end(primarySide, workerSide, writes.primary, false),
    writes,
    stop: () => {
      stopped = true;
    },
    resume: () => {
      stopped = false;
      for (const message of pipe.splice(0)) setImmediate(() => primarySide.emit('message', message));
    },
  };
}
