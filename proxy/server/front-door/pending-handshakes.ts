/**
 * A bound on TLS handshakes in progress. The connection bound (connection-bound.ts) counts a TLS
 * connection once its handshake is done (`secureConnection`), so sockets that connect and never
 * finish a handshake were bounded only by the handshake timeout: a flood of them would hold a
 * descriptor each for 30 s, and starve the process of descriptors long before the bound noticed.
 * Past this bound a handshake in progress is closed: among the oldest few, the one that has sent
 * the fewest bytes (the oldest among equals). A real client sends its whole ClientHello (hundreds of
 * bytes) at once and finishes within a round trip or two, so it outlives sockets that sent nothing
 * or a fragment, however fast they arrive; and a silent flood rotates through the bound instead of
 * holding it for the handshake timeout. The oldest few are at most half the bound: bytes are the
 * client's to choose, so a flood that sends more than a real client must still open half the bound
 * of new connections during that client's handshake before it can be picked (and the connection
 * just accepted, which has sent nothing yet, is never among them).
 */
import type http from 'node:http';
import type { Socket } from 'node:net';
import tls from 'node:tls';

/** At least this many handshakes may be in progress whatever the connection bound. */
export const MIN_PENDING_HANDSHAKES = 16;
/**
 * How many of the oldest handshakes are weighed when one must go: enough to look past a few
 * real clients in the middle of their handshake, few enough that a flood costs O(1) per socket.
 * Never more than half the bound (`evictionWindow`).
 */
export const EVICTION_WINDOW = 64;

/**
 * The oldest handshakes weighed under a bound of `maxPending`: at most half of it, so the newest
 * half (real clients just arrived, which cannot have sent more than a stalled flood) is never weighed.
 */
export function evictionWindow(maxPending: number): number {
  return Math.max(1, Math.min(EVICTION_WINDOW, Math.floor(maxPending / 2)));
}

/**
 * The default bound: an eighth of the connection bound (a handshake in progress holds one
 * descriptor and, on a loopback or LAN round trip, lasts milliseconds). Pure, for tests and docs.
 */
export function defaultMaxPendingHandshakes(maxConnections: number): number {
  return Math.max(MIN_PENDING_HANDSHAKES, Math.floor(maxConnections / 8));
}

/**
 * Which of `candidates` (oldest first) to close: the one that has sent the fewest bytes, the oldest
 * among equals. Pure, for the unit test.
 */
export function pickEviction(candidates: readonly { readonly bytesRead: number }[]): number {
  let pick = 0;
  for (let i = 1; i < candidates.length; i++) if (candidates[i]!.bytesRead < candidates[pick]!.bytesRead) pick = i;
  return pick;
}

/** Sockets between their TCP accept and the end of their TLS handshake (or their close). */
export class PendingHandshakes {
  readonly maxPending: number;
  readonly #window: number;
  /** Handshakes closed to make room for newer ones. */
  evicted = 0;
  /** In accept order (a Map iterates in insertion order), keyed by the peer's address and port. */
  readonly #pending = new Map<string, Socket>();

  constructor(maxPending: number) {
    this.maxPending = maxPending;
    this.#window = evictionWindow(maxPending);
  }

  get size(): number {
    return this.#pending.size;
  }

  /** A raw TCP connection was accepted: tracked until its handshake ends or it closes. */
  accepted(socket: Socket): void {
    const key = peerKey(socket);
    if (key === undefined) return; // already gone
    this.#pending.set(key, socket);
    socket.once('close', () => {
      if (this.#pending.get(key) === socket) this.#pending.delete(key);
    });
    while (this.#pending.size > this.maxPending) {
      const window: Array<[string, Socket]> = [];
      for (const entry of this.#pending) {
        window.push(entry);
        if (window.length === this.#window) break;
      }
      const [victimKey, victim] = window[pickEviction(window.map(([, s]) => s))]!;
      this.#pending.delete(victimKey);
      this.evicted++;
      victim.destroy();
    }
  }

  /** The handshake of the connection from this peer finished: the connection bound takes it over. */
  completed(socket: Socket): void {
    const key = peerKey(socket);
    if (key !== undefined) this.#pending.delete(key);
  }
}

/**
 * The raw socket and the TLSSocket made from it are different objects; the peer's address and port
 * name the one connection both stand for (unique among a listener's open connections).
 */
function peerKey(socket: Socket): string | undefined {
  const { remoteAddress, remotePort } = socket;
  return remoteAddress === undefined || remotePort === undefined ? undefined : `${remoteAddress} ${remotePort}`;
}

/**
 * Installs the bound on a TLS server (a plain server's connections are counted from their accept
 * already); undefined for a plain one.
 */
export function boundPendingHandshakes(server: http.Server, maxConnections: number): PendingHandshakes | undefined {
  if (!(server instanceof tls.Server)) return undefined;
  const pending = new PendingHandshakes(defaultMaxPendingHandshakes(maxConnections));
  server.prependListener('connection', (socket: Socket) => pending.accepted(socket));
  server.prependListener('secureConnection', (socket: tls.TLSSocket) => pending.completed(socket));
  return pending;
}
