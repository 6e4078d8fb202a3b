import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FrontDoorServer, startFrontDoorServer } from '../../../test/support/front-door-server.ts';
import { DEFAULT_FRONT_DOOR } from '../front-door.ts';

const KEEP_ALIVE_MS = 500;
const LIMITS = { ...DEFAULT_FRONT_DOOR, keepAliveTimeoutMs: KEEP_ALIVE_MS, headersTimeoutMs: 1000 };
let listening: FrontDoorServer;
let port: number;

beforeAll(async () => {
  listening = await startFrontDoorServer({ limits: LIMITS });
  port = listening.port;
});

afterAll(() => listening.close());

/** Whether the server closed a kept-alive connection within `forMs` while it was sent `filler` every 100 ms. */
async function closedWhileSending(filler: string, forMs: number): Promise<boolean> {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  let closed = false;
  socket.on('close', () => (closed = true));
  socket.write('GET /a HTTP/1.1\r\nHost: x\r\n\r\n');
  await new Promise((resolve) => socket.once('data', resolve));
  socket.resume();
  const deadline = performance.now() + forMs;
  while (!closed && performance.now() < deadline) {
    socket.write(filler);
    await sleep(100);
  }
  socket.destroy();
  return closed;
}

describe('the keep-alive timeout', () => {
  it('closes a kept-alive connection that sends blank lines and no request', async () => {
    // Keep-alive, then the head timeout for what the client sent: well within 20 keep-alive timeouts.
    expect(await closedWhileSending('\r\n', 20 * KEEP_ALIVE_MS)).toBe(true);
  }, 30_000);

  it('serves a next request whose head began within the keep-alive timeout and ends past it, within the head timeout', async () => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.write('GET /a HTTP/1.1\r\nHost: x\r\n\r\n');
    while (!text.includes('ok')) await sleep(10);
    await sleep(KEEP_ALIVE_MS * 0.6);
    const head = 'GET /b HTTP/1.1\r\nHost: x\r\n\r\n';
    // Half the head now, the rest once the keep-alive timeout has passed (well within the head timeout).
    socket.write(head.slice(0, 10));
    await sleep(KEEP_ALIVE_MS);
    socket.write(head.slice(10));
    for (let i = 0; i < 200 && text.split('ok').length < 3; i++) await sleep(10);
    socket.destroy();
    expect(text.match(/HTTP\/1\.1 200/g)).toHaveLength(2);
  });
});
