import http2 from 'node:http2';
import type tls from 'node:tls';
import { describe, expect, it } from 'vitest';
import { useRawTlsFrontDoor } from '../../../test/support/front-door-server.ts';
import { FRAME, frame, PREFACE } from '../../../test/support/http2-frames.ts';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL } = http2.constants;
const door = useRawTlsFrontDoor();

/** How the handler saw the request body end: `end <bytes>` or `error <bytes>`. */
async function uploadThen(last: (socket: tls.TLSSocket) => void): Promise<string> {
  let outcome!: (how: string) => void;
  const seen = new Promise<string>((resolve) => (outcome = resolve));
  const listening = await door.listen({}, (req, res) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => (bytes += chunk.length));
    req.on('end', () => {
      outcome(`end ${bytes}`);
      res.end('stored');
    });
    req.on('error', () => outcome(`error ${bytes}`));
  });
  const socket = await door.connect(listening.port);
  socket.resume();
  // :method PUT (literal, name from the static table), :scheme https, :path /, :authority localhost; no Content-Length.
  const head = Buffer.concat([
    Buffer.from([0x02, 3]),
    Buffer.from('PUT'),
    Buffer.from([0x87, 0x84, 0x01, 9]),
    Buffer.from('localhost'),
  ]);
  socket.write(
    Buffer.concat([
      PREFACE,
      frame(FRAME.SETTINGS, 0, 0),
      frame(FRAME.HEADERS, 0x4 /* END_HEADERS */, 1, head),
      frame(FRAME.DATA, 0, 1, Buffer.alloc(1000, 0x61)),
    ]),
  );
  last(socket);
  return seen;
}

function rstStream(code: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(code, 0);
  return frame(FRAME.RST_STREAM, 0, 1, payload);
}

describe('an HTTP/2 upload the client resets mid-body', () => {
  it('with NO_ERROR fails its body, as with CANCEL: never a truncated body that ends', async () => {
    expect(await uploadThen((socket) => socket.write(rstStream(NGHTTP2_NO_ERROR)))).toMatch(/^error /);
  });

  it('with CANCEL fails its body', async () => {
    expect(await uploadThen((socket) => socket.write(rstStream(NGHTTP2_CANCEL)))).toMatch(/^error /);
  });

  it('one sent whole (END_STREAM) ends its body', async () => {
    expect(await uploadThen((socket) => socket.write(frame(FRAME.DATA, 0x1 /* END_STREAM */, 1)))).toBe('end 1000');
  });
});
