import { describe, expect, it } from 'vitest';
import { type FrontDoorServer, useRawTlsFrontDoor } from '../../../test/support/front-door-server.ts';
import { FRAME, frame, PREFACE } from '../../../test/support/http2-frames.ts';
import { waitUntil } from '../../../test/harness/index.ts';
import type { FrontDoorLimits } from '../front-door.ts';

const MiB = 1024 * 1024;
const door = useRawTlsFrontDoor();

/** A listener answering every request with `bytes` written whole. */
function listen(limits: Partial<FrontDoorLimits>, bytes: number): Promise<FrontDoorServer> {
  const body = Buffer.alloc(bytes, 0x61);
  return door.listen(limits, (_req, res) => {
    res.writeHead(200, { 'content-length': body.length });
    res.end(body);
  });
}

/**
 * An HTTP/2 connection whose stream and connection windows are as wide as allowed, one GET sent,
 * then the socket never read again.
 */
async function getAndStopReading(port: number): Promise<void> {
  const socket = await door.connect(port);
  expect(socket.alpnProtocol).toBe('h2');
  const initialWindow = Buffer.alloc(6);
  initialWindow.writeUInt16BE(0x4, 0);
  initialWindow.writeUInt32BE(0x7fffffff, 2);
  const connectionWindow = Buffer.alloc(4);
  connectionWindow.writeUInt32BE(0x7fffffff - 65_535, 0);
  // :method GET, :scheme https, :path /, :authority localhost (HPACK static table).
  const head = Buffer.concat([Buffer.from([0x82, 0x87, 0x84, 0x01, 9]), Buffer.from('localhost')]);
  socket.write(
    Buffer.concat([
      PREFACE,
      frame(FRAME.SETTINGS, 0, 0, initialWindow),
      frame(0x8 /* WINDOW_UPDATE */, 0, 0, connectionWindow),
      frame(FRAME.HEADERS, 0x4 | 0x1 /* END_HEADERS | END_STREAM */, 1, head),
    ]),
  );
  socket.pause();
}

describe('an HTTP/2 client that reads nothing at the TCP level', () => {
  it('an idle session it holds (its answer written, none of it read) is cut once the keep-alive GOAWAY could not go out', async () => {
    // Small enough to be all handed to the socket, so the stream ends and the session idles.
    const server = await listen({ keepAliveTimeoutMs: 200 }, 2 * MiB);
    await getAndStopReading(server.port);
    await waitUntil(() => server.door.counters().http2.goaways.idle === 1, { timeoutMs: 3000 });
    await waitUntil(() => server.door.counters().open === 0, { timeoutMs: 3000 });
    expect(server.door.counters().http2.openSessions).toBe(0);
  });

  it('a session the drain closed is cut once its last stream closed, though its bytes never left', async () => {
    const server = await listen({ keepAliveTimeoutMs: 600_000 }, 2 * MiB);
    await getAndStopReading(server.port);
    await waitUntil(
      () => server.door.counters().http2.streams === 1 && server.door.counters().http2.openStreams === 0,
      {
        timeoutMs: 3000,
      },
    );
    server.door.drain();
    await waitUntil(() => server.door.counters().open === 0, { timeoutMs: 3000 });
  });

  it('a download it stalls is reset at the send timeout and, the reset never going out, its stream and connection are let go', async () => {
    // Far more than the loopback's socket buffers hold: the stream keeps unsent bytes.
    const server = await listen({ sendIdleTimeoutMs: 500, bodyIdleTimeoutMs: 500 }, 24 * MiB);
    await getAndStopReading(server.port);
    await waitUntil(() => server.door.counters().http2.resetsSent.send_timeout === 1, { timeoutMs: 3000 });
    await waitUntil(() => server.door.counters().open === 0, { timeoutMs: 3000 });
    const { http2 } = server.door.counters();
    expect(http2.openStreams).toBe(0);
    expect(http2.openSessions).toBe(0);
  });
});
