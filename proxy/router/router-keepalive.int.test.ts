/**
 * The router's pooled connections to a gateway against the gateway's keep-alive timeout: a pooled
 * connection must be closed by the router before the gateway closes it, or a request sent on it as
 * the gateway closes it fails with "socket hang up" (a 502 for an upload, which cannot be retried).
 * A real router process with its default idle timeout (120 s), in front of an in-test HTTP server
 * standing in for the writer that announces `Keep-Alive: timeout=4`.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { request } from '../../test/support/content.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { answerHealthProbe } from '../../test/support/health-probe.ts';

const KEEP_ALIVE_MS = 4000;

let writer: http.Server;
let router: GatewayProcess;

beforeAll(async () => {
  writer = http.createServer((req, res) => {
    if (answerHealthProbe(req, res)) return;
    req.resume();
    req.on('end', () => res.writeHead(201, { 'content-type': 'application/json' }).end('{}'));
  });
  writer.keepAliveTimeout = KEEP_ALIVE_MS;
  await new Promise<void>((resolve) => writer.listen(0, '127.0.0.1', resolve));
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: `http://127.0.0.1:${(writer.address() as AddressInfo).port}`,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '60000',
    },
    timeoutMs: 90_000,
  });
}, 120_000);

afterAll(async () => {
  await router?.stop('SIGTERM');
  writer?.closeAllConnections();
  await new Promise((r) => writer?.close(r));
});

it('closes a pooled upstream connection two seconds before the gateway announced it would', async () => {
  const closed = new Promise<{ byRouter: boolean; afterMs: number }>((resolve) => {
    writer.once('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      const socket = req.socket;
      let byRouter = false;
      // The router's FIN arrives as 'end'; the server's own keep-alive timeout destroys the socket without one.
      socket.once('end', () => (byRouter = true));
      res.once('finish', () => {
        const finishedAt = performance.now();
        socket.once('close', () => resolve({ byRouter, afterMs: performance.now() - finishedAt }));
      });
    });
  });
  const put = await request(`${router.url}/api/v1/repositories/r/artifacts/pooled`, {
    method: 'PUT',
    headers: { authorization: 'Bearer ark_k_s' },
    body: Buffer.from('pooled'),
  });
  expect(put.status).toBe(201);
  const { byRouter, afterMs } = await closed;
  expect(byRouter).toBe(true);
  // The router keeps a pooled socket until two seconds before the announced timeout.
  expect(afterMs).toBeGreaterThan(KEEP_ALIVE_MS - 2000 - 250);
  expect(afterMs).toBeLessThan(KEEP_ALIVE_MS);
}, 30_000);
