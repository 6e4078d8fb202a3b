/**
 * Below this a buffer is not worth a callback or a microtask of its own to free early: a small
 * answer leaves little garbage, and the bookkeeping would cost a 4 KiB request more than it saves.
 */
export const RELEASE_MIN_BYTES = 16 * 1024;

/**
 * Gives a buffer's memory back now instead of at V8's next major collection.
 *
 * Why: every socket read and every body chunk node:http's parser hands out is a fresh ArrayBuffer
 * outside the JavaScript heap. Left to the collector, a streamed GiB leaves ~1–2 GiB of them behind;
 * V8 reclaims them only with a full mark-compact, which it starts each time ~64 MiB of such memory
 * has piled up, and every new read lands in memory the CPU has never cached.
 * Released as soon as the bytes are handed on, the allocator reuses the same warm block for the
 * next read and the collector has nothing to chase (docs/router.md, "CPU per GiB"); uploads free
 * each body chunk once it is copied into their ring (overlapped-writer.ts, s3-socket-write.ts).
 *
 * Only a buffer that is its whole ArrayBuffer (one made for this read or chunk alone) is released;
 * a slice of a shared pool, a SharedArrayBuffer or an already released one is left alone. After the
 * call the buffer and every view of its memory are empty: call it only when nothing reads it any more.
 */
export function releaseBuffer(buffer: Uint8Array): void {
  const memory = buffer.buffer;
  if (
    buffer.byteOffset === 0 &&
    buffer.byteLength === memory.byteLength &&
    memory instanceof ArrayBuffer &&
    !memory.detached &&
    buffer.byteLength > 0
  ) {
    try {
      memory.transfer(0);
    } catch {
      // Not detachable (held by the runtime): the collector frees it as before.
    }
  }
}
