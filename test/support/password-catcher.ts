/**
 * What another local account could run on a port a PostgreSQL client is sent to: a server that asks
 * every client for its password in clear text (PostgreSQL's AuthenticationCleartextPassword) and
 * keeps whatever it receives.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface PasswordCatcher {
  readonly port: number;
  /** Every byte clients sent, as text. */
  received(): string;
  close(): Promise<void>;
}

/**
 * Listens on 127.0.0.1:`port` (0: a free one), waiting up to `boundMs` for a taken port to be freed.
 * `letIn`: instead of asking for the password, lets every client in at once (AuthenticationOk,
 * ReadyForQuery) and keeps what it sends next, its queries.
 */
export async function catchPasswords(port = 0, boundMs = 0, letIn = false): Promise<PasswordCatcher> {
  const chunks: Buffer[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
    let asked = false;
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (asked) return;
      asked = true;
      // AuthenticationCleartextPassword ('R', length 8, code 3), or AuthenticationOk (code 0)
      // followed by ReadyForQuery ('Z', length 5, idle).
      const message = Buffer.alloc(letIn ? 15 : 9);
      message.write('R', 0);
      message.writeInt32BE(8, 1);
      message.writeInt32BE(letIn ? 0 : 3, 5);
      if (letIn) {
        message.write('Z', 9);
        message.writeInt32BE(5, 10);
        message.write('I', 14);
      }
      socket.write(message);
    });
  });
  const deadline = performance.now() + boundMs;
  for (;;) {
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) break;
    if (performance.now() > deadline) throw new Error(`port ${port} did not become free within ${boundMs} ms`);
    await sleep(20);
  }
  return {
    port: (server.address() as net.AddressInfo).port,
    received: () => Buffer.concat(chunks).toString('latin1'),
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
