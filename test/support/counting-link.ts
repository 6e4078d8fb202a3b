/**
 * A TCP relay that counts the bytes flowing each way, to measure a gateway's origin traffic at
 * the origin's side of the link (what a store bills as egress): the gateway connects here instead
 * of to the store. Stopped when the test file ends.
 */
import net from 'node:net';
import { onFileEnd } from './file-end.ts';

export interface CountingLink {
  readonly host: string;
  readonly port: number;
  /** Bytes the origin sent towards the gateway (response bytes, headers included). */
  fromOrigin(): number;
  /** Connections made through the link. */
  connections(): number;
  /**
   * Lets at most `bytes` more (and the rest of the chunk that crosses them) pass from the origin,
   * then holds its bytes back on every connection, new ones too, until `release`: an origin that
   * stops answering mid-body.
   */
  holdAfter(bytes: number): void;
  release(): void;
  /** Resets the connection carrying the origin's bytes once `bytes` more have passed: a store link cut mid-answer. */
  cutOnceAfter(bytes: number): void;
  stop(): Promise<void>;
}

const links = new Set<CountingLink>();
onFileEnd(async () => {
  for (const link of [...links]) await link.stop();
});

/**
 * Bytes from `from` go to `to`, and `from`'s end (its peer's FIN) is passed on as `to`'s end, after
 * the bytes still queued for `to`: a store that closes its connection after an answer (S3 servers
 * do for `connection: close`) has its whole answer delivered, as without the link. Destroying `to`
 * there instead dropped the end of an answer the gateway had not read yet (a 200 cut short), and
 * reset a peer still sending. With `from` ended its writable side ends too (no half-open
 * connections), so what `to` receives afterwards has nowhere to go: it is read and dropped.
 */
function relay(from: net.Socket, to: net.Socket): void {
  from.pipe(to);
  from.on('end', () => {
    to.unpipe(from);
    to.resume();
  });
}

export async function startCountingLink(target: { host: string; port: number }): Promise<CountingLink> {
  let down = 0;
  let connections = 0;
  /** Where the origin's bytes stop passing (a count of `down`); none while undefined. */
  let holdAt: number | undefined;
  /** Where the connection carrying the origin's bytes is reset, once (a count of `down`). */
  let cutAt: number | undefined;
  const sockets = new Set<net.Socket>();
  const origins = new Set<net.Socket>();
  const server = net.createServer((client) => {
    connections++;
    const origin = net.connect(target.port, target.host);
    sockets.add(client).add(origin);
    origins.add(origin);
    origin.on('data', (chunk: Buffer) => {
      down += chunk.length;
      if (holdAt !== undefined && down >= holdAt) for (const o of origins) o.pause();
      if (cutAt !== undefined && down >= cutAt) {
        cutAt = undefined;
        cut();
      }
    });
    origin.on('close', () => origins.delete(origin));
    relay(client, origin);
    relay(origin, client);
    // After the relay: piping resumes its source.
    if (holdAt !== undefined && down >= holdAt) origin.pause();
    // A reset (or any error) on one side is one for the other side too: its peer sees the cut.
    const cut = () => {
      client.destroy();
      origin.destroy();
    };
    client.on('error', cut).on('close', () => sockets.delete(client));
    origin.on('error', cut).on('close', () => sockets.delete(origin));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const link: CountingLink = {
    host: '127.0.0.1',
    port,
    fromOrigin: () => down,
    connections: () => connections,
    cutOnceAfter(bytes) {
      cutAt = down + bytes;
    },
    holdAfter(bytes) {
      holdAt = down + bytes;
    },
    release() {
      holdAt = undefined;
      for (const o of origins) o.resume();
    },
    async stop() {
      links.delete(link);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  links.add(link);
  return link;
}
