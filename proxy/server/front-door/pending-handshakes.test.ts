import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  defaultMaxPendingHandshakes,
  EVICTION_WINDOW,
  evictionWindow,
  MIN_PENDING_HANDSHAKES,
  PendingHandshakes,
  pickEviction,
} from './pending-handshakes.ts';

/** A socket as PendingHandshakes sees it: a peer, the bytes it sent, and whether it was closed. */
class FakeSocket extends EventEmitter {
  static #port = 1000;
  readonly remoteAddress = '192.0.2.1';
  readonly remotePort = FakeSocket.#port++;
  destroyed = false;
  bytesRead: number;
  constructor(bytesRead: number) {
    super();
    this.bytesRead = bytesRead;
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

function accept(pending: PendingHandshakes, bytesRead: number): FakeSocket {
  const socket = new FakeSocket(bytesRead);
  pending.accepted(socket as unknown as Socket);
  return socket;
}

describe('pending TLS handshakes', () => {
  it('the default bound is an eighth of the connection bound, never below the minimum', () => {
    expect(defaultMaxPendingHandshakes(8)).toBe(MIN_PENDING_HANDSHAKES);
    expect(defaultMaxPendingHandshakes(464)).toBe(58);
    expect(defaultMaxPendingHandshakes(32_720)).toBe(4090);
  });

  it.each([
    { bytes: [0, 0, 0], pick: 0, why: 'all silent: the oldest' },
    { bytes: [517, 0, 6], pick: 1, why: 'a sent ClientHello outlives a silent socket' },
    { bytes: [6, 6, 0], pick: 2, why: 'fewest bytes, even when younger' },
    { bytes: [517, 1700, 6, 6], pick: 2, why: 'the oldest among equals' },
  ])('closes the least advanced handshake: $why', ({ bytes, pick }) => {
    expect(pickEviction(bytes.map((bytesRead) => ({ bytesRead })))).toBe(pick);
  });

  it('weighs at most half the bound, and at most the eviction window', () => {
    expect(evictionWindow(MIN_PENDING_HANDSHAKES)).toBe(8);
    expect(evictionWindow(58)).toBe(29);
    expect(evictionWindow(4090)).toBe(EVICTION_WINDOW);
    expect(evictionWindow(1)).toBe(1);
  });

  it('a bound full of stalled handshakes that sent more than a client: the client is not the one closed', () => {
    const pending = new PendingHandshakes(58);
    const stalled = Array.from({ length: 58 }, () => accept(pending, 16_000));
    // Just accepted, it has sent nothing yet: the fewest bytes of all, yet not weighed.
    const client = accept(pending, 0);
    expect(client.destroyed).toBe(false);
    expect(stalled.filter((s) => s.destroyed)).toEqual([stalled[0]]);
    client.bytesRead = 517;
    // The flood must open more than half the bound of connections during the client's handshake.
    for (let i = 0; i < 29; i++) accept(pending, 16_000);
    expect(client.destroyed).toBe(false);
    expect(pending.size).toBe(58);
  });
});
