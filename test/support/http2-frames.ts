/** Raw HTTP/2 frames (RFC 9113 §4.1), for tests that speak to a server below any client library. */

/** The client connection preface. */
export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

export const FRAME = {
  DATA: 0,
  HEADERS: 1,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

/** One frame: its 9-byte header, then `payload`. */
export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head.writeUInt8(type, 3);
  head.writeUInt8(flags, 4);
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/** A WINDOW_UPDATE of `increment` (31 bits; 0 and past 2^31-1 are the client's errors) on `streamId` (0: the connection). */
export function windowUpdate(streamId: number, increment: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(increment >>> 0, 0);
  return frame(FRAME.WINDOW_UPDATE, 0, streamId, payload);
}
