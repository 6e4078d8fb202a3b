/**
 * Writes a planned content body to the response, streaming from an open blob. Backpressure comes
 * from the socket (pipe / `drain`); with a meter every slice is charged before it is written. A
 * client disconnect rejects the pending step; the caller closes the file in `finally`.
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { FileHandle } from 'node:fs/promises';
import type { ByteMeter } from '../storage-adapter/byte-meter.ts';
import type { Segment } from './content-response.ts';

/** Read size from disk; larger than Node's 64 KiB default, fewer round trips to the thread pool. */
export const READ_CHUNK_BYTES = 256 * 1024;

async function writeChunk(res: ServerResponse, chunk: Buffer, signal: AbortSignal): Promise<void> {
  if (!res.write(chunk)) await once(res, 'drain', { signal });
}

export async function sendSegments(res: ServerResponse, handle: FileHandle, segments: readonly Segment[], options: { meter?: ByteMeter | undefined; signal: AbortSignal }): Promise<void> {
  const { meter, signal } = options;
  for (const segment of segments) {
    signal.throwIfAborted();
    if (segment.kind === 'bytes') {
      await writeChunk(res, segment.data, signal);
      continue;
    }
    const { start, end } = segment.range;
    if (!meter) {
      const source = handle.createReadStream({ start, end, autoClose: false, highWaterMark: READ_CHUNK_BYTES });
      await pipeline(source, res, { end: false, signal });
      continue;
    }
    const quantum = Math.max(1, Math.min(meter.quantumBytes, READ_CHUNK_BYTES));
    const source = handle.createReadStream({ start, end, autoClose: false, highWaterMark: quantum });
    try {
      for await (const chunk of source) {
        await meter.take((chunk as Buffer).length, signal);
        await writeChunk(res, chunk as Buffer, signal);
      }
    } finally {
      source.destroy();
    }
  }
  res.end();
  if (!res.writableFinished) await once(res, 'finish', { signal });
}
