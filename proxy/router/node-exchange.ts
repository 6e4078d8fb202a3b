/**
 * A request with a body (or a HEAD) sent to a gateway over node:http: what undici does not do for
 * the router (dispatched-exchange.ts carries GETs). Uploads need `Expect: 100-continue` relayed
 * (undici's HTTP/1.1 client refuses that header) and node:http's client streams a request body with
 * backpressure; a HEAD keeps its connection here (undici closes the connection after every HEAD).
 */
import type http from 'node:http';
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { relayChunks } from './relay-chunks.ts';
import type { Upstream, UpstreamCall, UpstreamResponse } from './proxied-request.ts';

export interface NodeTarget {
  readonly request: typeof http.request;
  readonly agent: http.Agent;
  readonly hostname: string;
  readonly port: number;
}

/** The request to the gateway; its socket's byte counters feed the idle sweep. */
class NodeCall implements UpstreamCall {
  readonly #request: ClientRequest;
  readonly #client: IncomingMessage;
  /** The gateway may have the client's body: it has one, sent at once or after the gateway's 100. */
  bodyWanted = false;
  /** The gateway's answer, once its head is in. */
  message: IncomingMessage | undefined;
  constructor(request: ClientRequest, client: IncomingMessage) {
    this.#request = request;
    this.#client = client;
  }
  moved(): number {
    const socket = this.#request.socket as Socket | null;
    return socket && !socket.connecting ? socket.bytesRead + socket.bytesWritten : -1;
  }
  destroy(err?: Error): void {
    this.#request.destroy(err);
  }
  waitsOnClient(): boolean {
    const message = this.message;
    // The answer's relay is paused until the client takes what it was sent (relay-chunks.ts).
    if (message !== undefined) return message.isPaused();
    // The body's relay waits for the client's next bytes, not for the gateway to take the last.
    const client = this.#client;
    return this.bodyWanted && !client.complete && !client.isPaused();
  }
}

/** node:http's response object seen as an UpstreamResponse. */
class NodeResponse implements UpstreamResponse {
  readonly status: number;
  readonly rawHeaders: readonly string[];
  readonly connection: string | string[] | undefined;
  readonly #message: IncomingMessage;
  constructor(message: IncomingMessage) {
    this.#message = message;
    this.status = message.statusCode ?? 502;
    this.rawHeaders = message.rawHeaders;
    this.connection = message.headers.connection;
  }
  relayTo(res: ServerResponse, done: (err?: Error) => void): void {
    const message = this.#message;
    // A body cut short fails the message with `aborted` (emitted because a listener is attached).
    message.on('error', done);
    relayChunks(message, res);
    message.on('end', () => {
      res.end();
      done();
    });
  }
  discard(done: () => void): void {
    const message = this.#message;
    // 'close' follows the end of the body, or its cut (the idle sweep destroys the request).
    if (message.destroyed) done();
    else message.once('close', done);
    message.resume();
  }
  destroy(): void {
    this.#message.destroy();
  }
}

/**
 * Sends the request; `onResponse` hears the head, `onError` a failure before or during it. With
 * `expectsContinue` the head goes out with `Expect: 100-continue` (in `headers`) and the gateway's
 * 100 is relayed to the client before the body flows.
 */
export function sendOverNode(
  target: NodeTarget,
  req: IncomingMessage,
  res: ServerResponse,
  request: Upstream,
  onResponse: (response: UpstreamResponse) => void,
  onError: (err: Error) => void,
): UpstreamCall {
  const proxyReq = target.request({
    hostname: target.hostname,
    port: target.port,
    method: req.method,
    path: req.url,
    // A head given as a list gets no Host from node:http: the list has one (proxy-handler.ts).
    headers: request.headers,
    agent: target.agent,
  });
  const call = new NodeCall(proxyReq, req);
  proxyReq.on('error', onError);
  proxyReq.on('response', (message) => {
    call.message = message;
    onResponse(new NodeResponse(message));
  });
  if (request.expectsContinue)
    proxyReq.once('continue', () => {
      call.bodyWanted = request.hasBody;
      res.writeContinue();
    });
  else call.bodyWanted = request.hasBody;
  if (request.hasBody) {
    relayChunks(req, proxyReq);
    req.on('end', () => proxyReq.end());
  } else proxyReq.end();
  return call;
}
