import type http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import type { Logger } from 'pino';
import { WWW_AUTHENTICATE } from '../../policy/auth/authenticator.ts';
import { GatewayError } from './errors.ts';
import { sendError } from './http-errors.ts';
import { makeGraceful } from './graceful-server.ts';
import { createListener } from './listener.ts';
import type { ServedTls } from '../tls/served-tls.ts';
import { GatewayResponse } from './gateway-response.ts';
import { type ExchangeServer, onResponseClose, RequestExchange } from './request-exchange.ts';
import {
  DEFAULT_FRONT_DOOR,
  HEAD_TIMEOUT_RESPONSE,
  installFrontDoor,
  serverOptions,
  type FrontDoor,
  type FrontDoorLimits,
} from './front-door.ts';
import { RouteTable } from './route-table.ts';
import { simplePathname } from './request-path.ts';
import type { Gate, RequestContext, RequestObservation, Route } from './route-types.ts';

export interface GatewayServer {
  readonly server: http.Server;
  listen(port: number, host: string): Promise<AddressInfo>;
  /** Stops accepting, waits up to `timeoutMs` for in-flight requests, then cuts the rest. */
  close(timeoutMs: number): Promise<void>;
  readonly inFlight: number;
  /** Open connections, refusals and timeouts of the front door (metrics). */
  readonly frontDoor: FrontDoor;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,64}$/;

export function createGatewayServer(options: {
  routes: readonly Route[];
  gates: readonly Gate[];
  log: Logger;
  /** A reader: every method but GET/HEAD is 405 `read_only` before any route or gate runs. */
  readOnly?: boolean;
  /** Called once per request when its response closes (metrics). Must not throw. */
  onRequest?: (observation: RequestObservation) => void;
  /** Timeouts and the connection bound (proxy/server/front-door.ts); default the documented defaults. */
  limits?: FrontDoorLimits;
  /** The certificate to serve (proxy/tls/served-tls.ts); undefined = plain HTTP. */
  tls?: ServedTls;
}): GatewayServer {
  const table = new RouteTable<Route>();
  for (const route of options.routes) table.add({ methods: route.methods, template: route.template, value: route });
  const gates = [...options.gates];
  const { log } = options;

  const limits = options.limits ?? DEFAULT_FRONT_DOOR;
  // The per-request line is at info: below that level its fields are not even gathered.
  const logRequests = log.isLevelEnabled('info');
  const server = createListener({
    http: { ...serverOptions(limits), ServerResponse: GatewayResponse },
    tls: options.tls,
    log,
  });
  const exchangeServer: ExchangeServer = {
    log,
    logRequests,
    onRequest: options.onRequest,
    continueBody: (req, res) => frontDoor.continueBody(req, res),
  };
  const frontDoor = installFrontDoor(server, limits, log, (req, plainRes) => {
    const res = plainRes as GatewayResponse;
    if (!frontDoor.admit(req, res)) return;
    const incomingId = req.headers['x-request-id'];
    const reqId = typeof incomingId === 'string' && REQUEST_ID.test(incomingId) ? incomingId : randomUUID();
    res.addEarlyHeader('x-request-id', reqId);

    // The URL object is built when a handler asks for it (the query of a pre-signed link), or at
    // once when the path is not simple enough to read without the parser (request-path.ts).
    const target = req.url ?? '/';
    let url: URL | undefined;
    let pathname = simplePathname(target);
    if (pathname === undefined) {
      try {
        url = new URL(target, 'http://gateway.invalid');
      } catch {
        url = undefined;
      }
      pathname = url?.pathname;
    }
    const exchange = new RequestExchange(exchangeServer, req, res, reqId, url);
    res.exchange = exchange;
    res.on('close', onResponseClose);
    if (pathname === undefined) {
      sendError(res, new GatewayError('invalid_request', 'The request target is not a valid URL.'), log);
      return;
    }
    if (options.readOnly && req.method !== 'GET' && req.method !== 'HEAD') {
      // The body stays unread: close the connection after the answer rather than drain it.
      const headers: Record<string, string> = { allow: 'GET, HEAD' };
      if (!req.complete) headers.connection = 'close';
      sendError(res, new GatewayError('read_only', undefined, { headers }), log.child({ reqId }));
      return;
    }
    const match = table.match(req.method ?? 'GET', pathname);
    if (match.kind === 'not_found') {
      sendError(res, new GatewayError('not_found', 'No such route.'), log.child({ reqId }));
      return;
    }
    if (match.kind === 'method_not_allowed') {
      exchange.route = match.template;
      sendError(
        res,
        new GatewayError('method_not_allowed', undefined, { headers: { allow: match.allow.join(', ') } }),
        log.child({ reqId, route: exchange.route }),
      );
      return;
    }
    const routeDef = match.route.value;
    exchange.route = match.route.template;
    exchange.params = match.params;
    exchange.access = routeDef.access;
    void runRoute(exchange, routeDef, gates);
  });

  server.on('clientError', (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket) => {
    // Malformed request lines/headers: answer 400 when the socket still can, never crash. Bytes the
    // parser refuses inside Authorization are credentials that cannot be valid: the same 401 as any
    // other bad key, so a caller learns nothing from the difference.
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      // The head took longer than the header timeout: 408, the client's doing (nginx does the same).
      if (socket.writable && !socket.destroyed) socket.end(HEAD_TIMEOUT_RESPONSE);
      else socket.destroy();
      log.debug({ code: 'client_timeout', phase: 'head' }, 'request head timed out');
      return;
    }
    if (socket.writable && !socket.destroyed) {
      const badCredentials = err.rawPacket !== undefined && hasMalformedAuthorization(err.rawPacket);
      const status = badCredentials ? '401 Unauthorized' : '400 Bad Request';
      const body = JSON.stringify(
        badCredentials
          ? { code: 'unauthorized', message: 'A valid API key is required.' }
          : { code: 'invalid_request', message: 'Malformed HTTP request.' },
      );
      const extra = badCredentials ? WWW_AUTHENTICATE.map((c) => `www-authenticate: ${c}\r\n`).join('') : '';
      // Every response carries x-request-id (the contract); the head could not be read, so a new one.
      socket.end(
        `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${randomUUID()}\r\n${extra}connection: close\r\n\r\n${body}`,
      );
    } else {
      socket.destroy();
    }
    log.debug({ code: err.code }, 'client error');
  });

  const graceful = makeGraceful(server, frontDoor);
  return {
    server,
    get inFlight() {
      return graceful.inFlight;
    },
    frontDoor,
    listen: (port, host) => graceful.listen(port, host),
    close: (timeoutMs) => graceful.close(timeoutMs),
  };
}

/** True when the raw request head has an Authorization line with bytes HTTP does not allow. */
function hasMalformedAuthorization(raw: Buffer): boolean {
  const head = raw.toString('latin1');
  const match = /(?:^|\n)authorization:([^\n]*)/i.exec(head);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  return match !== null && /[\x00-\x08\x0a-\x1f\x7f]/.test(match[1]!.replace(/\r$/, ''));
}

async function runRoute(ctx: RequestContext, route: Route, gates: readonly Gate[]): Promise<void> {
  try {
    for (const gate of gates) {
      const pending = gate(ctx);
      if (pending) await pending;
    }
    if (!route.continuesBodyItself) ctx.continueBody();
    await route.handle(ctx);
  } catch (err) {
    if (clientIsGone(ctx)) {
      // The client left (or was cut for idling): its doing, not a fault of ours.
      ctx.log.info(
        { code: 'client_aborted', reason: (err as Error | undefined)?.message },
        'client went away before the response finished',
      );
      if (!ctx.res.destroyed) ctx.res.destroy();
      return;
    }
    sendError(ctx.res, err, ctx.log);
  }
}

/** The response closed before it finished, or the connection is gone (Node detaches it at the end: null). */
function clientIsGone(ctx: RequestContext): boolean {
  // Already answered (the front door's 408 for a stalled body): the body's failure follows from it.
  if (ctx.res.writableFinished) return ctx.req.destroyed && !ctx.req.complete;
  const socket = ctx.req.socket as Socket | null;
  return ctx.signal.aborted || ctx.res.destroyed || socket === null || socket.destroyed;
}
