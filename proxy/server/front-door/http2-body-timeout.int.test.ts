/**
 * The request body timeout of an HTTP/2 stream against a real TLS gateway and node:http2 clients
 * that keep their connection busy (a PING every 200 ms, another stream downloading) while a request
 * body stalls: the stalled stream is answered 408 and reset, or cut when its answer had begun,
 * within about two body timeouts of its last byte, and what it held (its admission slot, an
 * upload's temporary) is let go. node:http2's own stream timeout is pushed back by the session's
 * frames whenever the stream has an answer queued, so the stalls whose answer the client does not
 * take are the session's `StallWatch`'s to find.
 */
import { readdir } from 'node:fs/promises';
import http2 from 'node:http2';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../../test/support/auth.ts';
import { randomContent, sha256 } from '../../../test/support/content.ts';
import { useTestDatabase } from '../../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
  waitUntil,
} from '../../../test/harness/index.ts';
import { type Http2Answer, http2Request } from '../../../test/support/http2-request.ts';

const MiB = 1024 * 1024;
const REPO = 'h2bodytimeout';
const BODY_TIMEOUT_S = 2;
const BODY_TIMEOUT_MS = BODY_TIMEOUT_S * 1000;
/** Longest a stalled stream may stay: one to two body timeouts, with room for a loaded machine. */
const CUT_WITHIN_MS = 5 * BODY_TIMEOUT_MS;
/** How long a test waits for a cut that may never come (without the protection). */
const GIVE_UP_MS = 8 * BODY_TIMEOUT_MS;
const db = useTestDatabase();
let ca: CertificateAuthority;
let certFile: string;
let keyFile: string;
let owner: { key: string };
const payload = randomContent(4 * MiB + 17);
const content = `/api/v1/repositories/${REPO}/artifacts/big.bin/content`;
let gw: GatewayProcess & { https: string };

beforeAll(async () => {
  const dir = await makeTempDir('arkvory-h2-body-');
  ca = await createCertificateAuthority(dir);
  ({ certFile, keyFile } = await issueServerCertificate(ca, dir));
  await createRepository(db.pool, REPO);
  owner = await createServiceAccount(db.pool, { name: 'h2-body-owner', grants: { [REPO]: 'write' } });
  const started = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_TLS_CERT_FILE: certFile,
      ARKVORY_TLS_KEY_FILE: keyFile,
      ARKVORY_BODY_TIMEOUT_SECONDS: String(BODY_TIMEOUT_S),
      ARKVORY_SEND_TIMEOUT_SECONDS: String(BODY_TIMEOUT_S),
      ARKVORY_ADMISSION_WAIT_SECONDS: '1',
    },
    waitFor: 'none',
  });
  gw = Object.assign(started, { https: `https://127.0.0.1:${started.port}` });
  await waitUntil(async () => (await request('/health/live').catch(() => undefined))?.status === 200, {
    what: 'the gateway to serve HTTP/2',
    timeoutMs: 40_000,
    process: gw,
  });
  const put = await request(`/api/v1/repositories/${REPO}/artifacts/big.bin`, {
    method: 'PUT',
    headers: bearer(owner.key),
    body: payload,
  });
  expect([200, 201]).toContain(put.status);
});
afterAll(() => gw.stop());

/** One request, read to its end, on `session` or a new connection. */
function request(target: string, options: Parameters<typeof http2Request>[3] = {}): Promise<Http2Answer> {
  return http2Request(gw.https, ca.certPem, target, options);
}

/** A scrape of `/metrics`: series → value (0 when absent). */
async function scrape(): Promise<(series: string) => number> {
  const text = (await request('/metrics')).body.toString();
  return (series) => {
    for (const line of text.split('\n'))
      if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
    return 0;
  };
}

/** Files under the store's `tmp/` (an upload in progress streams into one there). */
async function temporaries(): Promise<string[]> {
  const entries = await readdir(join(gw.dataDir, 'tmp'), { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

const UPLOADS = 'arkvory_admission_active{kind="upload"}';
const DOWNLOADS = 'arkvory_admission_active{kind="download"}';

/** A session that sends a PING every 200 ms (each acked by the gateway) until it closes. */
function pingingSession(settings: http2.Settings = {}): http2.ClientHttp2Session {
  const session = http2.connect(gw.https, { ca: ca.certPem, settings });
  session.on('error', () => {});
  const pinger = setInterval(() => {
    if (!session.destroyed) session.ping(() => {});
  }, 200);
  session.once('close', () => clearInterval(pinger));
  return session;
}

interface Stalled {
  readonly status: Promise<number>;
  /** The stream's close code and when it closed, or undefined when it was still open at `GIVE_UP_MS`. */
  readonly closed: Promise<{ code: number; at: number } | undefined>;
  readonly body: Buffer[];
}

/** A request on `session` that announces a 1 MiB body and sends 10 KiB of it, then nothing. */
function stalledRequest(session: http2.ClientHttp2Session, headers: Record<string, string>): Stalled {
  const stream = session.request({ 'content-length': String(MiB), ...headers }, { endStream: false });
  stream.on('error', () => {});
  const status = new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
  const body: Buffer[] = [];
  stream.on('data', (c: Buffer) => body.push(c));
  const closed = Promise.race([
    new Promise<{ code: number; at: number }>((resolve) =>
      stream.once('close', () => resolve({ code: stream.rstCode!, at: performance.now() })),
    ),
    sleep(GIVE_UP_MS).then(() => undefined),
  ]);
  stream.write(Buffer.alloc(10 * 1024, 7));
  return { status, closed, body };
}

async function uploader(name: string): Promise<string> {
  return (await createServiceAccount(db.pool, { name, grants: { [REPO]: 'write' } })).key;
}

describe('HTTP/2: a stalled request body is timed out whatever else its connection does', () => {
  it('an upload stalled mid-body while its client PINGs every 200 ms gets 408 and RST_STREAM NO_ERROR within two body timeouts; its slot and temporary are let go', async () => {
    const key = await uploader('h2-body-pinger');
    const was = await scrape();
    const session = pingingSession();
    try {
      const upload = stalledRequest(session, {
        ':method': 'PUT',
        ':path': `/api/v1/repositories/${REPO}/artifacts/pinged.bin`,
        ...bearer(key),
      });
      const stalledAt = performance.now();
      await waitUntil(async () => (await temporaries()).length > 0 && (await scrape())(UPLOADS) === 1, {
        what: 'the upload to hold its slot and a temporary',
        timeoutMs: BODY_TIMEOUT_MS / 2,
      });
      const closed = await upload.closed;
      expect(closed, 'the stalled upload was still open').toBeDefined();
      expect(await upload.status).toBe(408);
      expect(Buffer.concat(upload.body).toString()).toContain('"request_timeout"');
      expect(closed!.code).toBe(http2.constants.NGHTTP2_NO_ERROR);
      expect(closed!.at - stalledAt).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 100);
      expect(closed!.at - stalledAt).toBeLessThan(CUT_WITHIN_MS);
      await waitUntil(async () => (await scrape())(UPLOADS) === 0 && (await temporaries()).length === 0, {
        what: 'the upload slot and temporary to be let go',
        timeoutMs: BODY_TIMEOUT_MS,
      });
      const now = await scrape();
      const delta = (series: string) => now(series) - was(series);
      expect(delta('arkvory_http_client_timeouts_total{phase="body"}')).toBe(1);
      expect(delta('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}')).toBe(1);
      // The stream was reset, not the connection.
      expect(session.destroyed).toBe(false);
    } finally {
      session.destroy();
    }
  });

  it('an upload stalled mid-body while another stream of its connection keeps downloading gets 408 within two body timeouts; the downloads go on', async () => {
    const key = await uploader('h2-body-beside');
    const session = pingingSession();
    let downloading = true;
    let downloads = 0;
    // One download after another on the same connection, read at full speed, all along.
    const loop = (async () => {
      while (downloading) {
        const got = await request(content, { headers: bearer(owner.key), session });
        expect(sha256(got.body)).toBe(sha256(payload));
        downloads++;
      }
    })();
    try {
      await waitUntil(async () => downloads > 0, { what: 'a first download', timeoutMs: 20_000 });
      const upload = stalledRequest(session, {
        ':method': 'PUT',
        ':path': `/api/v1/repositories/${REPO}/artifacts/beside.bin`,
        ...bearer(key),
      });
      const stalledAt = performance.now();
      const before = downloads;
      const closed = await upload.closed;
      expect(closed, 'the stalled upload was still open').toBeDefined();
      expect(await upload.status).toBe(408);
      expect(closed!.code).toBe(http2.constants.NGHTTP2_NO_ERROR);
      expect(closed!.at - stalledAt).toBeLessThan(CUT_WITHIN_MS);
      expect(downloads).toBeGreaterThan(before);
      await waitUntil(async () => (await scrape())(UPLOADS) === 0 && (await temporaries()).length === 0, {
        what: 'the upload slot and temporary to be let go',
        timeoutMs: BODY_TIMEOUT_MS,
      });
    } finally {
      downloading = false;
      await loop.catch(() => {});
      session.destroy();
    }
  });

  it('an upload stalled mid-body whose client takes no byte of the 408 and PINGs is cut (CANCEL, body_timeout) within three body timeouts; its slot and temporary are let go', async () => {
    const key = await uploader('h2-body-zero-window');
    const was = await scrape();
    // A zero stream window: the 408's head arrives, its body stays queued in the gateway.
    const session = pingingSession({ initialWindowSize: 0 });
    try {
      const upload = stalledRequest(session, {
        ':method': 'PUT',
        ':path': `/api/v1/repositories/${REPO}/artifacts/zero-window.bin`,
        ...bearer(key),
      });
      const stalledAt = performance.now();
      expect(await upload.status).toBe(408);
      const closed = await upload.closed;
      expect(closed, 'the stream whose 408 the client does not take was still open').toBeDefined();
      expect(closed!.code).toBe(http2.constants.NGHTTP2_CANCEL);
      // One body timeout to the 408, one to two more to the cut.
      expect(closed!.at - stalledAt).toBeLessThan(CUT_WITHIN_MS + BODY_TIMEOUT_MS);
      await waitUntil(async () => (await scrape())(UPLOADS) === 0 && (await temporaries()).length === 0, {
        what: 'the upload slot and temporary to be let go',
        timeoutMs: BODY_TIMEOUT_MS,
      });
      const now = await scrape();
      const delta = (series: string) => now(series) - was(series);
      // The 408 and the cut: both the body's.
      expect(delta('arkvory_http_client_timeouts_total{phase="body"}')).toBe(2);
      expect(delta('arkvory_http_client_timeouts_total{phase="send"}')).toBe(0);
      expect(delta('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}')).toBe(1);
      expect(delta('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}')).toBe(0);
      expect(session.destroyed).toBe(false);
    } finally {
      session.destroy();
    }
  });

  it('a download whose announced body stalls, to a client that takes no byte and PINGs, is cut (CANCEL, body_timeout) within two body timeouts; its slot is let go', async () => {
    const was = await scrape();
    const session = pingingSession({ initialWindowSize: 0 });
    try {
      // The gateway answers a GET without reading its body: the answer is under way, queued toward a
      // client that takes none of it, while the request body is still due.
      const download = stalledRequest(session, { ':path': content, ...bearer(owner.key) });
      const stalledAt = performance.now();
      expect(await download.status).toBe(200);
      expect((await scrape())(DOWNLOADS)).toBe(1);
      const closed = await download.closed;
      expect(closed, 'the stalled download was still open').toBeDefined();
      expect(closed!.code).toBe(http2.constants.NGHTTP2_CANCEL);
      expect(closed!.at - stalledAt).toBeGreaterThanOrEqual(BODY_TIMEOUT_MS - 100);
      expect(closed!.at - stalledAt).toBeLessThan(CUT_WITHIN_MS);
      await waitUntil(async () => (await scrape())(DOWNLOADS) === 0, {
        what: 'the download slot to be let go',
        timeoutMs: BODY_TIMEOUT_MS,
      });
      const now = await scrape();
      const delta = (series: string) => now(series) - was(series);
      expect(delta('arkvory_http_client_timeouts_total{phase="body"}')).toBe(1);
      expect(delta('arkvory_http_client_timeouts_total{phase="send"}')).toBe(0);
      expect(delta('arkvory_http2_stream_resets_sent_total{reason="body_timeout"}')).toBe(1);
      expect(delta('arkvory_http2_stream_resets_sent_total{reason="send_timeout"}')).toBe(0);
      expect(session.destroyed).toBe(false);
      // The line crosses the gateway's stdout pipe, which the test reads on its own turns.
      await waitUntil(() => gw.logLines().some((l) => l.code === 'client_timeout' && l.phase === 'request_body'), {
        what: 'the body timeout in the log',
        timeoutMs: 5_000,
      });
    } finally {
      session.destroy();
    }
  });
});
