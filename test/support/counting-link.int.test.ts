/**
 * The counting link relays a store's answers as the store sent them: the slice cache's tests read
 * through it, and a byte it drops is a cut answer they blame on the gateway.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { waitUntil } from '../harness/index.ts';
import { startCountingLink } from './counting-link.ts';

const servers: net.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** A store on loopback that answers each connection with `answer` and closes, reading (and dropping) what it is sent. */
async function closingStore(answer: Buffer): Promise<net.AddressInfo> {
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.resume();
    socket.end(answer);
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server.address() as net.AddressInfo;
}

describe('counting link', () => {
  it('delivers the whole answer of a store that closes after it, while the client is still sending and has not read it yet', async () => {
    const answer = randomBytes(256 * 1024);
    const store = await closingStore(answer);
    const link = await startCountingLink({ host: '127.0.0.1', port: store.port });
    const client = net.connect(link.port, link.host);
    client.pause();
    const received: Buffer[] = [];
    const outcome = new Promise<Error | undefined>((resolve) => {
      client.on('error', resolve);
      client.on('end', () => resolve(undefined));
    });
    // An upload the store answered without waiting for: the client sends it all before it reads.
    await new Promise<void>((resolve) => client.once('connect', () => resolve()));
    const sent = await new Promise<Error | undefined>((resolve) => {
      client.once('error', resolve);
      client.write(Buffer.alloc(16 * 1024 * 1024), (err) => resolve(err ?? undefined));
    });
    expect(sent).toBeUndefined();
    client.on('data', (chunk: Buffer) => received.push(chunk));
    client.resume();
    expect(await outcome).toBeUndefined();
    expect(Buffer.concat(received).equals(answer)).toBe(true);
    client.destroy();
    await link.stop();
  });

  it('holds the origin back after the bytes it was allowed, new connections too, and passes the rest once released', async () => {
    const answer = randomBytes(4 * 1024 * 1024);
    const store = await closingStore(answer);
    const link = await startCountingLink({ host: '127.0.0.1', port: store.port });
    const ALLOWED = 256 * 1024;
    link.holdAfter(ALLOWED);
    // An error shows as bytes missing below.
    const read = (socket: net.Socket) => {
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      const ended = new Promise<void>((resolve) => socket.on('end', () => resolve()));
      return { bytes: () => Buffer.concat(chunks), ended };
    };
    const first = read(net.connect(link.port, link.host).on('error', () => {}));
    await waitUntil(() => link.fromOrigin() >= ALLOWED, { what: 'the allowed bytes' });
    // A new connection once the allowance is spent passes nothing; the first stops within a chunk.
    const second = read(net.connect(link.port, link.host).on('error', () => {}));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(link.fromOrigin()).toBeLessThan(ALLOWED + 128 * 1024);
    expect(first.bytes().length).toBeLessThan(ALLOWED + 128 * 1024);
    expect(second.bytes().length).toBe(0);
    link.release();
    await Promise.all([first.ended, second.ended]);
    expect(first.bytes().equals(answer)).toBe(true);
    expect(second.bytes().equals(answer)).toBe(true);
    await link.stop();
  });
});
