/**
 * Downloads whose client left before any answer, over a real gateway's TLS listener (HTTP/1.1 and
 * HTTP/2 on one port): one download slot per principal, held by a paced download; a second request
 * queues for the slot and its client leaves (an HTTP/1.1 connection closed, an HTTP/2 stream reset)
 * before any head. Each is recorded as 499 (request line, `arkvory_http_requests_total`) and is no
 * download in the usage statistics; the paced one, cut after its body began, is a 200 and a download.
 * An HTTP/2 download whose zero-window client resets its stream took no body byte: no bytes out, no
 * download, however many the gateway had queued.
 */
import http2 from 'node:http2';
import https from 'node:https';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { http2Request } from '../../test/support/http2-request.ts';

const REPO = 'aborts';
const SIZE = 2 * 1024 * 1024;
/** The held download lasts SIZE / RATE = 32 s at least: it holds the slot through the whole test. */
const RATE = 64 * 1024;
const artifact = `/api/v1/repositories/${REPO}/artifacts/paced.bin`;

const db = useTestDatabase();
let ca: CertificateAuthority;
let gateway: GatewayProcess;
let origin: string;
let key: string;

/** One whole request on its own HTTP/2 connection. */
function h2(target: string, options: { method?: string; body?: Buffer; headers?: Record<string, string> } = {}) {
  return http2Request(origin, ca.certPem, target, options);
}

/** `name{labels…}` samples of the gateway's /metrics whose line contains every one of `parts`. */
async function metric(name: string, ...parts: string[]): Promise<number> {
  const text = (await h2('/metrics')).body.toString();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(`${name}{`) && parts.every((p) => line.includes(p))) sum += Number(line.split(' ').pop());
  return sum;
}

const queued = () => metric('arkvory_admission_queued', 'kind="download"');

/** The gateway's `request` line of the request sent with `x-request-id: id`, once written. */
async function requestLine(id: string): Promise<Record<string, unknown>> {
  let line: Record<string, unknown> | undefined;
  await waitUntil(
    () => (line = gateway.logLines().find((l) => l.msg === 'request' && l.clientReqId === id)) !== undefined,
    { what: `the request line of ${id}`, timeoutMs: 20_000, process: gateway },
  );
  return line!;
}

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-aborts-');
  ca = await createCertificateAuthority(dir);
  const cert = await issueServerCertificate(ca, dir);
  await createRepository(db.pool, REPO);
  key = (await createServiceAccount(db.pool, { grants: { [REPO]: 'write' } })).key;
  gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: cert.certFile,
      ARKVORY_TLS_KEY_FILE: cert.keyFile,
      ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '1',
      ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(RATE),
      ARKVORY_USAGE_STATS_FLUSH_SECONDS: '1',
    },
    waitFor: 'none',
  });
  origin = `https://127.0.0.1:${gateway.port}`;
  await waitUntil(async () => (await h2('/health/status')).status === 200, {
    what: 'the gateway to serve over HTTP/2',
    timeoutMs: 60_000,
    retryOnError: true,
    process: gateway,
  });
  const put = await h2(artifact, { method: 'PUT', body: randomContent(SIZE), headers: bearer(key) });
  expect(put.status).toBe(201);
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
});

it('a download whose client left before any answer is a 499 and no download, over HTTP/1.1 and HTTP/2', async () => {
  // The held download: its head arrived, so it holds the principal's only slot; it reads as paced.
  const holder = http2.connect(origin, { ca: ca.certPem });
  holder.on('error', () => {});
  const held = holder.request({ ':path': `${artifact}/content`, 'x-request-id': 'held', ...bearer(key) });
  held.on('error', () => {});
  let heldBytes = 0;
  held.on('data', (c: Buffer) => (heldBytes += c.length));
  const heldStatus = await new Promise<number>((resolve) =>
    held.once('response', (h) => resolve(Number(h[':status']))),
  );
  expect(heldStatus).toBe(200);

  // HTTP/1.1: queued behind the slot, then the connection closes before any head.
  let h1Head = false;
  const h1 = https.request(`${origin}${artifact}/content`, {
    ca: ca.certPem,
    agent: false,
    headers: { 'x-request-id': 'gone-h1', ...bearer(key) },
  });
  h1.on('response', () => (h1Head = true));
  h1.on('error', () => {});
  h1.end();
  await waitUntil(async () => (await queued()) === 1, { what: 'the HTTP/1.1 download to queue', timeoutMs: 20_000 });
  h1.destroy();
  await waitUntil(async () => (await queued()) === 0, { what: 'the HTTP/1.1 download to leave', timeoutMs: 20_000 });

  // HTTP/2: queued the same way, then its stream is reset (CANCEL) before any head.
  const session = http2.connect(origin, { ca: ca.certPem });
  session.on('error', () => {});
  let h2Head = false;
  const stream = session.request({ ':path': `${artifact}/content`, 'x-request-id': 'gone-h2', ...bearer(key) });
  stream.on('response', () => (h2Head = true));
  stream.on('error', () => {});
  await waitUntil(async () => (await queued()) === 1, { what: 'the HTTP/2 download to queue', timeoutMs: 20_000 });
  stream.close(http2.constants.NGHTTP2_CANCEL);
  await waitUntil(async () => (await queued()) === 0, { what: 'the HTTP/2 download to leave', timeoutMs: 20_000 });
  session.close();

  // The held download is cut after its body began: a download all the same (docs/observability.md).
  await waitUntil(() => heldBytes > 0, { what: 'the held download to receive body bytes', timeoutMs: 20_000 });
  expect(heldBytes).toBeLessThan(SIZE);
  holder.destroy();
  expect(h1Head).toBe(false);
  expect(h2Head).toBe(false);

  for (const id of ['gone-h1', 'gone-h2'])
    expect(await requestLine(id)).toMatchObject({ status: 499, completed: false, bytesOut: 0 });
  const heldLine = await requestLine('held');
  expect(heldLine).toMatchObject({ status: 200, completed: false });
  expect(heldLine.bytesOut).toBeGreaterThan(0);

  const content = ['method="GET"', '/content"'];
  expect(await metric('arkvory_http_requests_total', ...content, 'status="499"')).toBe(2);
  expect(await metric('arkvory_http_requests_total', ...content, 'status="200"')).toBe(1);

  // The gone ones closed before the held one: a flush that has its download has their counts too.
  let rows: Array<{ downloads: number }> = [];
  await waitUntil(
    async () => (rows = (await db.pool.query('SELECT downloads::int FROM arkvory_usage_artifacts')).rows).length > 0,
    { what: 'the usage flush', timeoutMs: 20_000 },
  );
  expect(rows).toEqual([{ downloads: 1 }]);
}, 120_000);

it('an HTTP/2 download reset before the client took a byte of its body counts no bytes out and is no download', async () => {
  // A zero window: the gateway queues the first chunks, none of which can go out.
  const session = http2.connect(origin, { ca: ca.certPem, settings: { initialWindowSize: 0 } });
  session.on('error', () => {});
  const stream = session.request({ ':path': `${artifact}/content`, 'x-request-id': 'unread-h2', ...bearer(key) });
  stream.on('error', () => {});
  let got = 0;
  stream.on('data', (c: Buffer) => (got += c.length));
  const status = await new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
  expect(status).toBe(200);
  // The head left with the first chunk written; a moment more for the next ones to queue behind it.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  stream.close(http2.constants.NGHTTP2_CANCEL);
  const line = await requestLine('unread-h2');
  session.close();
  expect(got).toBe(0);
  expect(line).toMatchObject({ status: 200, completed: false, bytesOut: 0 });
  // The flush that has this request (the fifth of the key's) has its download, if it were one.
  await waitUntil(
    async () => (await db.pool.query('SELECT requests::int FROM arkvory_usage_principal_days')).rows[0]?.requests === 5,
    { what: 'the flush of the reset download', timeoutMs: 20_000 },
  );
  const { rows } = await db.pool.query('SELECT downloads::int, bytes::int FROM arkvory_usage_artifacts');
  expect(rows).toMatchObject([{ downloads: 1 }]);
}, 60_000);
