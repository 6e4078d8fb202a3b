/**
 * One accepted client and its upstream socket, joined by two links. As in the real server, a
 * socket is closed whole (not half-closed) when its link ends, and the other link then sees EOF.
 * A reset_peer toxic present when the connection opens makes every close by the proxy a reset
 * (the real server sets SO_LINGER 0 on both sockets at link start).
 */
import type { Socket } from 'node:net';
import { Link } from './link.ts';
import type { StreamDirection, ToxicSpec } from './toxics.ts';

export class Connection {
  readonly links: Readonly<Record<StreamDirection, Link>>;
  readonly #client: Socket;
  readonly #upstream: Socket;
  readonly #isResetOnClose: boolean;

  constructor(client: Socket, upstream: Socket, toxics: Readonly<Record<StreamDirection, readonly ToxicSpec[]>>, onClosed: () => void) {
    this.#client = client;
    this.#upstream = upstream;
    this.#isResetOnClose = [...toxics.upstream, ...toxics.downstream].some((t) => t.type === 'reset_peer');
    this.links = {
      upstream: new Link({ direction: 'upstream', source: client, dest: upstream, toxics: toxics.upstream, closeDest: () => this.#close(upstream) }),
      downstream: new Link({ direction: 'downstream', source: upstream, dest: client, toxics: toxics.downstream, closeDest: () => this.#close(client) }),
    };
    let open = 2;
    const closed = (): void => {
      if (--open === 0) onClosed();
    };
    client.once('close', closed);
    upstream.once('close', closed);
    this.links.upstream.start();
    this.links.downstream.start();
  }

  /** The proxy was disabled or deleted: drop both sockets now. */
  destroy(): void {
    this.links.upstream.kill();
    this.links.downstream.kill();
    for (const socket of [this.#client, this.#upstream]) {
      if (socket.destroyed) continue;
      if (this.#isResetOnClose) socket.resetAndDestroy();
      else socket.destroy();
    }
  }

  #close(socket: Socket): void {
    if (socket.destroyed) return;
    if (this.#isResetOnClose) socket.resetAndDestroy();
    else socket.destroySoon();
  }
}
