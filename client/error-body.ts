/**
 * The start of an error answer's body, for its `{ code, message }`: at most `limit` bytes are read
 * and the rest is dropped with the connection. A broken or hostile server (or a proxy in between)
 * may send an error body of any size, and read whole it went into memory as one string.
 */
import type { Readable } from 'node:stream';

/** Gateway error bodies are a few hundred bytes of JSON. */
export const ERROR_BODY_LIMIT = 64 * 1024;

export async function errorBody(body: Readable, limit = ERROR_BODY_LIMIT): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  body.on('error', () => {});
  try {
    for await (const chunk of body) {
      const bytes = chunk as Buffer;
      chunks.push(bytes.subarray(0, limit - size));
      size += Math.min(bytes.length, limit - size);
      if (size >= limit) break;
    }
  } catch {
    // A body cut short still says what it held.
  }
  body.destroy();
  return Buffer.concat(chunks).toString('utf8');
}
