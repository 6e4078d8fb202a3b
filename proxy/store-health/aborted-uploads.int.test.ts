/**
 * A client that cuts its uploads is its own fault, not the store's: on a real gateway (directory
 * store, nginx behind the static-HTTP store, MinIO behind the S3 store) PUTs of a declared length
 * or chunked, and multipart parts, whose connection is reset mid-body leave the store `ok`
 * (/health/status), count no store failure, log no warning or error and no 5xx; the next GET and
 * PUT of everyone else succeed. Over HTTP/2 the same holds for streams cancelled mid-body and for
 * bodies that stall past the body timeout (the gateway answers 408 and fails the body it read).
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import http2 from 'node:http2';
import net from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { createCertificateAuthority, issueServerCertificate, waitUntil } from '../../test/harness/index.ts';
import { FILE_STORE_KINDS, startStoreBacking } from '../../test/support/store-kinds.ts';

let writer: string;
let reader: string;

/**
 * A PUT that declares 1 MiB (or is chunked), waits for 100 Continue (the gateway is then reading the
 * body into the store), sends 64 KiB and resets the connection; resolves once the socket is closed.
 */
async function abortedPut(baseUrl: string, target: string, chunked = false): Promise<void> {
  const url = new URL(baseUrl);
  const socket = net.connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  const continued = new Promise<void>((resolve, reject) => {
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (head.startsWith('HTTP/1.1 100')) resolve();
      else reject(new Error(`expected 100 Continue, got ${head.split('\r\n')[0]}`));
    };
    socket.on('data', onData);
  });
  socket.write(
    `PUT ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${writer}\r\n` +
      `${chunked ? 'Transfer-Encoding: chunked' : 'Content-Length: 1048576'}\r\nExpect: 100-continue\r\n\r\n`,
  );
  await continued;
  const bytes = Buffer.alloc(65_536, 1);
  const sent = chunked ? Buffer.concat([Buffer.from('10000\r\n'), bytes, Buffer.from('\r\n')]) : bytes;
  await new Promise<void>((resolve) => socket.write(sent, () => resolve()));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.resetAndDestroy();
  await closed;
}

/**
 * The same over HTTP/2: after 64 KiB of its 1 MiB the stream is cancelled (RST_STREAM), or stalls
 * until the gateway answers 408 for its body timeout (which fails the body it was reading).
 */
async function abortedH2Put(origin: string, ca: Buffer, target: string, how: 'cancel' | 'stall'): Promise<void> {
  const session = http2.connect(origin, { ca });
  session.on('error', () => {});
  try {
    const stream = session.request({
      ':method': 'PUT',
      ':path': target,
      authorization: `Bearer ${writer}`,
      'content-length': '1048576',
      expect: '100-continue',
    });
    stream.on('error', () => {});
    const early = await Promise.race([
      once(stream, 'continue').then(() => undefined),
      once(stream, 'response').then(([headers]) => headers as http2.IncomingHttpHeaders),
    ]);
    if (early) throw new Error(`answered ${early[':status']} before 100 Continue`);
    await new Promise<void>((resolve) => stream.write(Buffer.alloc(65_536, 1), () => resolve()));
    const closed = once(stream, 'close');
    if (how === 'cancel') stream.close(http2.constants.NGHTTP2_CANCEL);
    else {
      const [response] = (await once(stream, 'response')) as [http2.IncomingHttpHeaders];
      expect(response[':status']).toBe(408);
      stream.resume();
    }
    await closed;
  } finally {
    session.close();
  }
}

describe.each([...FILE_STORE_KINDS, 'minio' as const])('uploads cut by the client (%s store)', (kind) => {
  // A database per store: a database is bound to the one store it first saw.
  const db = useTestDatabase();
  beforeAll(async () => {
    await createRepository(db.pool, 'ab');
    ({ key: writer } = await createServiceAccount(db.pool, { grants: { ab: 'write' } }));
    ({ key: reader } = await createServiceAccount(db.pool, { scopes: ['read'], grants: { ab: 'read' } }));
  });

  it('leave the store ok and everyone else served; logged and counted as the client’s', async () => {
    const backing = await startStoreBacking(kind);
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ...backing.env,
        // Probes far apart: the state here is what the uploads themselves report.
        ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: '60000',
        ARKVORY_BLOB_CACHE_BYTES: '0',
        ARKVORY_OPEN_FILE_CACHE_ENTRIES: '0',
      },
    });
    const file = randomContent(4096);
    const contentUrl = `${gw.url}/api/v1/repositories/ab/artifacts/${kind}-kept.bin/content`;
    const put = await request(`${gw.url}/api/v1/repositories/ab/artifacts/${kind}-kept.bin`, {
      method: 'PUT',
      headers: bearer(writer),
      body: file,
    });
    expect(put.status).toBe(201);

    // Twice the failures in a row that make a store unreachable (fall is 2), PUTs and parts.
    for (let i = 0; i < 4; i++)
      await abortedPut(gw.url, `/api/v1/repositories/ab/artifacts/${kind}-cut-${i}.bin`, i % 2 === 1);
    const session = await request(`${gw.url}/api/v1/repositories/ab/artifacts/${kind}-parts.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(writer), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(session.status).toBe(201);
    const upload = (JSON.parse(session.body.toString()) as { upload: string }).upload;
    for (let i = 0; i < 2; i++) await abortedPut(gw.url, `/api/v1/repositories/ab/uploads/${upload}/parts/${i + 1}`);

    const status = JSON.parse((await request(`${gw.url}/health/status`)).body.toString()) as {
      store: { state: string; lastError: unknown };
    };
    expect(status.store).toMatchObject({ state: 'ok', lastError: null });
    const read = await request(contentUrl, { headers: bearer(reader) });
    expect(read.status, read.body.toString()).toBe(200);
    expect(sha256(read.body)).toBe(sha256(file));
    const again = await request(`${gw.url}/api/v1/repositories/ab/artifacts/${kind}-after.bin`, {
      method: 'PUT',
      headers: bearer(writer),
      body: randomContent(4096),
    });
    expect(again.status, again.body.toString()).toBe(201);

    const metrics = (await request(`${gw.url}/metrics`)).body.toString();
    expect(metrics).toContain('arkvory_store_state{state="ok"} 1');
    expect(metrics).not.toMatch(/arkvory_store_failures_total\{source="request"\} [1-9]/);
    expect(metrics).not.toMatch(/arkvory_http_requests_total\{[^}]*status="5\d\d"[^}]*\} [1-9]/);
    expect(await gw.stop()).toBe(0);
    const loud = gw.logLines().filter((l) => Number(l.level) >= 40);
    expect(loud).toEqual([]);
    const gone = gw.logLines().filter((l) => l.code === 'client_aborted');
    expect(gone.length).toBeGreaterThanOrEqual(6);
  });
});

async function ask(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body?: Buffer,
): Promise<{ status: number; body: string }> {
  const stream = session.request(headers);
  stream.end(body);
  const [response] = (await once(stream, 'response')) as [http2.IncomingHttpHeaders];
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return { status: Number(response[':status']), body: Buffer.concat(chunks).toString() };
}

describe('uploads cut or stalled by the client over HTTP/2 (fs store)', () => {
  const db = useTestDatabase();
  beforeAll(async () => {
    await createRepository(db.pool, 'ab');
    ({ key: writer } = await createServiceAccount(db.pool, { grants: { ab: 'write' } }));
  });

  it('leave the store ok; the next upload succeeds', async () => {
    const dir = await makeTempDir('arkvory-h2-abort-');
    const authority = await createCertificateAuthority(dir);
    const cert = await issueServerCertificate(authority, dir);
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_TLS_CERT_FILE: cert.certFile,
        ARKVORY_TLS_KEY_FILE: cert.keyFile,
        ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: '60000',
        // A stalled body is dropped after a second (the admission wait must be shorter).
        ARKVORY_BODY_TIMEOUT_SECONDS: '1',
        ARKVORY_ADMISSION_WAIT_SECONDS: '0',
      },
      waitFor: 'none',
    });
    const origin = `https://127.0.0.1:${gw.port}`;
    const ca = await readFile(authority.certFile);
    await waitUntil(
      async () => {
        const probe = http2.connect(origin, { ca });
        probe.on('error', () => {});
        try {
          return (await ask(probe, { ':path': '/health/status' })).status === 200;
        } finally {
          probe.close();
        }
      },
      { what: 'the gateway to serve HTTPS', timeoutMs: 60_000, retryOnError: true, process: gw },
    );
    for (const how of ['cancel', 'cancel', 'stall', 'stall'] as const) {
      await abortedH2Put(origin, ca, `/api/v1/repositories/ab/artifacts/h2-${how}-${randomUUID()}.bin`, how);
      // The client sees its stream closed before the gateway has let go of the upload's slot; with
      // one upload per principal and no admission wait, the next PUT would rightly get 429 busy.
      await waitUntil(
        async () => {
          const probe = http2.connect(origin, { ca });
          probe.on('error', () => {});
          try {
            const metrics = (await ask(probe, { ':path': '/metrics' })).body;
            return /^arkvory_admission_active\{kind="upload"\} 0$/m.test(metrics);
          } finally {
            probe.close();
          }
        },
        { what: 'the aborted upload to free its slot', timeoutMs: 10_000, process: gw },
      );
    }

    const session = http2.connect(origin, { ca });
    session.on('error', () => {}); // a reset is a failed request below, not an uncaught exception
    try {
      const status = JSON.parse((await ask(session, { ':path': '/health/status' })).body) as {
        store: { state: string };
      };
      expect(status.store.state).toBe('ok');
      const put = await ask(
        session,
        {
          ':method': 'PUT',
          ':path': '/api/v1/repositories/ab/artifacts/h2-after.bin',
          authorization: `Bearer ${writer}`,
        },
        randomContent(4096),
      );
      expect(put.status, put.body).toBe(201);
    } finally {
      session.close();
    }
    expect(await gw.stop()).toBe(0);
    expect(gw.logLines().filter((l) => Number(l.level) >= 40)).toEqual([]);
  });
});
