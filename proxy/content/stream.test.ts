import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { CHUNK_BYTES, MAX_MS_WITHOUT_TURN, sendSegments } from './stream.ts';

describe('sendSegments from a reader that answers at once into a socket that takes every write', () => {
  it('lets the event loop turn every few chunks, so other connections are accepted and read meanwhile', async () => {
    const data = randomBytes(64 * CHUNK_BYTES);
    // Each read answers at once, as from a slice in memory, after spending 0.25 ms of the thread.
    const reader = {
      read: async (buffer: Buffer, offset: number, length: number, position: number) => {
        const until = performance.now() + 0.25;
        while (performance.now() < until);
        const n = Math.min(length, data.length - position);
        data.copy(buffer, offset, position, position + n);
        return { bytesRead: n };
      },
    };
    let written = 0;
    const received: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written += chunk.length;
        received.push(Buffer.from(chunk));
        callback(); // taken at once: the write's own callback follows on the next tick
      },
    });
    // Every turn of the loop records how far the body had got.
    const atTurns: number[] = [];
    const turn = () => {
      atTurns.push(written);
      if (written < data.length) setImmediate(turn);
    };
    setImmediate(turn);
    await sendSegments(
      sink as unknown as ServerResponse,
      reader,
      [{ kind: 'range', range: { start: 0, end: data.length - 1 } }],
      undefined,
      { signal: new AbortController().signal },
    );
    expect(Buffer.concat(received).equals(data)).toBe(true);
    // Without the turns the whole body goes out before the loop turns once.
    const during = atTurns.filter((w) => w < data.length);
    expect(during.length).toBeGreaterThan(4);
    // A turn at least every MAX_MS_WITHOUT_TURN (8 reads of 0.25 ms), plus the chunks in flight.
    const mostChunksBetweenTurns = Math.ceil(MAX_MS_WITHOUT_TURN / 0.25) + 4;
    const gaps = during.slice(1).map((w, i) => w - during[i]!);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(mostChunksBetweenTurns * CHUNK_BYTES);
  });
});
