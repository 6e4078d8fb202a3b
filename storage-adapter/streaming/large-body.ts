/**
 * Which uploads take the large-body paths: direct I/O from an aligned ring (overlapped-writer.ts)
 * and hashing on the worker thread (off-thread-sha256.ts). Below this a body costs those paths
 * more in setup (a WebAssembly memory, shared slots) than it saves; a body of unknown length may be
 * anything, so it is treated as large.
 */
export const LARGE_BODY_BYTES = 4 * 1024 * 1024;

/** Whether a body declaring `expectedBytes` (undefined: not declared) is a large one. */
export function isLargeBody(expectedBytes: number | undefined): boolean {
  return expectedBytes === undefined || expectedBytes >= LARGE_BODY_BYTES;
}
