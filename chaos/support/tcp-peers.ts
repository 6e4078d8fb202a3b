/**
 * Real TCP peers for measuring toxics: an upstream server (echo, or say-goodbye-and-close) and a
 * client that records what arrives and when, and how the connection ended. All bind 127.0.0.1.
 */
import net from 'node:net';
import { waitUntil } from './wait.ts';

export interface TcpServer {
  readonly host: string;
  readonly port: number;
  /** "host:port", ready to be a proxy's upstream. */
  readonly address: string;
  close(): Promise<void>;
}

/** `echo` returns every byte; `goodbye` writes "bye" and closes at once. */
export async function startTcpServer(mode: 'echo' | 'goodbye'): Promise<TcpServer> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    if (mode === 'goodbye') socket.end('bye');
    else socket.pipe(socket);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  return {
    host: '127.0.0.1',
    port,
    address: `127.0.0.1:${port}`,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface Ending {
  /** ms after the client connected. */
  readonly atMs: number;
  /** The socket error code (e.g. ECONNRESET), if it ended with one. */
  readonly errorCode: string | undefined;
}

export interface TcpClient {
  readonly socket: net.Socket;
  /** performance.now() when the connection was established. */
  readonly connectedAtMs: number;
  receivedBytes(): number;
  received(): Buffer;
  /** Settles when the socket has closed. */
  readonly ended: Promise<Ending>;
  isEnded(): boolean;
  /** `ended`, or a rejection naming the wait if the socket is still open after `timeoutMs`. */
  endedWithin(timeoutMs: number): Promise<Ending>;
  /** Writes `payload` and resolves with the ms until `expectBytes` more bytes have arrived. */
  roundTripMs(payload: Buffer | string, expectBytes?: number, timeoutMs?: number): Promise<number>;
  close(): void;
}

/** Connects to host:port; rejects with the socket error (e.g. ECONNREFUSED) if that fails. */
export async function connectTcp(host: string, port: number): Promise<TcpClient> {
  const socket = net.connect({ host, port, noDelay: true });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const connectedAtMs = performance.now();
  const chunks: Buffer[] = [];
  let total = 0;
  let errorCode: string | undefined;
  let isEnded = false;
  socket.on('data', (data: Buffer) => {
    chunks.push(data);
    total += data.length;
  });
  socket.on('error', (err: NodeJS.ErrnoException) => (errorCode ??= err.code));
  const ended = new Promise<Ending>((resolve) => {
    socket.once('close', () => {
      isEnded = true;
      resolve({ atMs: performance.now() - connectedAtMs, errorCode });
    });
  });
  return {
    socket,
    connectedAtMs,
    receivedBytes: () => total,
    received: () => Buffer.concat(chunks),
    ended,
    isEnded: () => isEnded,
    endedWithin: (timeoutMs) =>
      Promise.race([
        ended,
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the connection was still open after ${timeoutMs} ms`)), timeoutMs).unref()),
      ]),
    async roundTripMs(payload, expectBytes, timeoutMs = 10_000) {
      const want = total + (expectBytes ?? Buffer.byteLength(payload));
      const startedMs = performance.now();
      socket.write(payload);
      await waitUntil(() => total >= want, { timeoutMs, what: `${want} bytes back` });
      return performance.now() - startedMs;
    },
    close: () => socket.destroy(),
  };
}
