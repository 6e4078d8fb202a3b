/**
 * Early refusal: a response that goes out before its request body was read carries
 * `Connection: close`, and the socket lingers (nginx's lingering_close): half-closed, the rest of
 * the body is discarded for at most LINGER.ms and LINGER.bytes, then it is closed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Lingering close after an early answer: the rest of the body is read and discarded for at most
 * `ms` (nginx's lingering_timeout is 5 s) and `bytes`; past `bytes` reading stops (the client's
 * sends block) until the time is up. A close with unread bytes sends a reset, which can destroy the
 * answer before the client has read it: lingering lets it read the answer first.
 */
export const LINGER = { ms: 5000, bytes: 1024 * 1024 } as const;

/** For a request with a body: answered before the body was read, close after the answer instead of reading it all. */
export function closeEarlyAnswer(socket: Socket, req: IncomingMessage, res: ServerResponse): void {
  const writeHead = res.writeHead;
  res.writeHead = function earlyRefusal(this: ServerResponse, ...args: unknown[]) {
    if (!req.complete) {
      this.shouldKeepAlive = false;
      linger(socket, req);
    }
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as typeof res.writeHead;
}

function linger(socket: Socket, req: IncomingMessage): void {
  let lingering = false;
  // Node ends a `Connection: close` response with destroySoon(); lingering replaces it.
  socket.destroySoon = function lingeringClose(this: Socket) {
    if (lingering) return;
    lingering = true;
    this.end();
    const timer = setTimeout(() => this.destroy(), LINGER.ms);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    let discarded = 0;
    req.on('data', (chunk: Buffer) => {
      discarded += chunk.length;
      // Enough read: stop reading (no reset that could drop the answer), close at the time bound.
      if (discarded > LINGER.bytes) req.pause();
    });
    req.on('error', () => this.destroy());
    req.on('end', () => this.destroy());
    req.resume();
  };
}
