/**
 * A TCP relay that counts the bytes flowing each way, to measure a gateway's origin traffic at
 * the origin's side of the link (what a store bills as egress): the gateway connects here instead
 * of to the store. Stopped when the test file ends.
 */
import net from 'node:net';
import { afterAll } from 'vitest';

export interface CountingLink {
  readonly host: string;
  readonly port: number;
  /** Bytes the origin sent towards the gateway (response bytes, headers included). */
  fromOrigin(): number;
  /** Connections made through the link. */
  connections(): number;
  stop(): Promise<void>;
}

const links = new Set<CountingLink>();
afterAll(async () => {
  for (const link of [...links]) await link.stop();
});

export async function startCountingLink(target: { host: string; port: number }): Promise<CountingLink> {
  let down = 0;
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    connections++;
    const origin = net.connect(target.port, target.host);
    sockets.add(client).add(origin);
    origin.on('data', (chunk: Buffer) => {
      down += chunk.length;
    });
    client.pipe(origin);
    origin.pipe(client);
    const close = () => {
      client.destroy();
      origin.destroy();
      sockets.delete(client);
      sockets.delete(origin);
    };
    client.on('error', close).on('close', close);
    origin.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const link: CountingLink = {
    host: '127.0.0.1',
    port,
    fromOrigin: () => down,
    connections: () => connections,
    async stop() {
      links.delete(link);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  links.add(link);
  return link;
}
