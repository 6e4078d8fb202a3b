/**
 * The static-HTTP store's own failure modes, with a real gateway in front of a real nginx: the
 * store going away before, during and after a download or an upload, a store that never answers,
 * a store without WebDAV MOVE, and multipart uploads staged on the store.
 */
import { readdir, readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, parseMultipart, randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitForStoreOk, waitUntil } from '../../test/harness/index.ts';
import { startStaticStore, type StaticStore } from '../../test/support/static-store.ts';
import { openUploadWithParts } from '../../test/support/multipart-upload.ts';

const MiB = 1024 * 1024;

async function entries(dir: string): Promise<string[]> {
  return readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
}

/** Every file under the store's tmp/, at any depth (a gateway stages in a directory of its own there). */
async function tmpFiles(root: string): Promise<string[]> {
  const found = await readdir(path.join(root, 'tmp'), { recursive: true, withFileTypes: true }).catch(
    (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [];
      throw err;
    },
  );
  return found.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

async function blobNames(root: string): Promise<string[]> {
  const out: string[] = [];
  const base = path.join(root, 'blobs', 'sha256');
  for (const a of await entries(base))
    for (const b of await entries(path.join(base, a))) out.push(...(await entries(path.join(base, a, b))));
  return out;
}

async function rssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

const json = (r: { body: Buffer }) => JSON.parse(r.body.toString()) as Record<string, unknown>;

/** A raw GET whose reading the test controls: resolves the head, then counts body bytes until close. */
function slowGet(
  port: number,
  target: string,
  key: string,
): {
  head: Promise<{ status: number; contentLength: number }>;
  received: () => number;
  resume(): void;
  closed: Promise<void>;
} {
  const socket = net.connect(port, '127.0.0.1');
  let buffered = Buffer.alloc(0);
  let headerDone = false;
  let bodyBytes = 0;
  let resolveHead!: (v: { status: number; contentLength: number }) => void;
  const head = new Promise<{ status: number; contentLength: number }>((r) => (resolveHead = r));
  socket.on('data', (d: Buffer) => {
    if (headerDone) {
      bodyBytes += d.length;
      return;
    }
    buffered = Buffer.concat([buffered, d]);
    const end = buffered.indexOf('\r\n\r\n');
    if (end < 0) return;
    headerDone = true;
    const text = buffered.subarray(0, end).toString('latin1');
    bodyBytes += buffered.length - end - 4;
    // Stop reading right after the head: the gateway must hold the rest back (backpressure).
    socket.pause();
    resolveHead({
      status: Number(text.split(' ')[1]),
      contentLength: Number(/content-length: (\d+)/i.exec(text)?.[1] ?? -1),
    });
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  socket.write(`GET ${target} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n\r\n`);
  return { head, received: () => bodyBytes, resume: () => socket.resume(), closed };
}

describe('the static-HTTP store under faults', () => {
  const db = useTestDatabase();
  let nginx: StaticStore;
  let gw: GatewayProcess;
  let key: string;
  const big = randomContent(50 * MiB);
  const base = () => `${gw.url}/api/v1/repositories/st/artifacts`;

  beforeAll(async () => {
    await createRepository(db.pool, 'st');
    ({ key } = await createServiceAccount(db.pool, { grants: { st: 'write' } }));
    nginx = await startStaticStore();
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_STORAGE_URL: nginx.url,
        // Well above the stall test's 1.5 s freeze: a store that takes no byte for this long fails the upload.
        ARKVORY_STORAGE_TIMEOUT_SECONDS: '5',
        ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '500',
      },
      timeoutMs: 60_000,
    });
    const put = await request(`${base()}/big.bin`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-digest': contentDigest(big) },
      body: big,
    });
    expect(put.status, put.body.toString()).toBe(201);
  });

  /**
   * Back from a store outage: the gateway takes reads and writes again once its probe saw the store
   * answer twice in a row (store health's hysteresis, docs/router.md); until then it answers 503
   * `store_unreachable`, which is another test's subject, not the next one's.
   */
  async function storeBack(): Promise<void> {
    await waitForStoreOk(`http://127.0.0.1:${gw.port}`);
  }

  async function withStoreDown(work: () => Promise<void>): Promise<void> {
    await nginx.stop();
    try {
      await work();
    } finally {
      await nginx.start();
      await storeBack();
    }
  }

  /** A failure of a store that is down: 502 `upstream_unreachable` until the gateway's store health says unreachable (two failures), then 503 `store_unreachable` at once. */
  function expectStoreDown(res: { status: number; body: Buffer }, what: string): void {
    const code = (json(res) as { code?: string }).code;
    if (res.status === 502) expect(code, what).toBe('upstream_unreachable');
    else {
      expect(res.status, what).toBe(503);
      expect(code, what).toBe('store_unreachable');
    }
  }

  it('nginx stopped in the middle of a download cuts the client connection; a Range retry after it returns completes the file', async () => {
    const get = slowGet(gw.port, '/api/v1/repositories/st/artifacts/big.bin/content', key);
    const head = await get.head;
    expect(head).toEqual({ status: 200, contentLength: big.length });
    await withStoreDown(async () => {
      get.resume();
      await get.closed;
      // Cut, not completed short: fewer bytes than Content-Length and the connection closed.
      expect(get.received()).toBeLessThan(big.length);
    });
    const log = gw
      .logLines()
      .find((l) => l.msg === 'request' && l.route?.toString().includes('/content') && l.completed === false);
    expect(log, 'the gateway logs the download as not completed').toBeDefined();

    // The client keeps what it had (a prefix of the file) and resumes with Range.
    const have = Math.min(get.received(), big.length - 1);
    const rest = await request(`${base()}/big.bin/content`, { headers: { ...bearer(key), range: `bytes=${have}-` } });
    expect(rest.status).toBe(206);
    expect(rest.headers['content-range']).toBe(`bytes ${have}-${big.length - 1}/${big.length}`);
    expect(sha256(Buffer.concat([big.subarray(0, have), rest.body]))).toBe(sha256(big));
  });

  it('with nginx down: reads and writes fail before the first byte (502 upstream_unreachable, then 503 store_unreachable once the gateway knows), nothing published', async () => {
    const small = randomContent(10_000);
    await withStoreDown(async () => {
      for (const method of ['GET', 'HEAD']) {
        const res = await request(`${base()}/big.bin/content`, {
          method,
          headers: { ...bearer(key), range: 'bytes=0-99' },
        });
        if (method === 'GET') expectStoreDown(res, method);
        else expect([502, 503], method).toContain(res.status);
      }
      const put = await request(`${base()}/down.bin`, { method: 'PUT', headers: bearer(key), body: small });
      expectStoreDown(put, 'PUT');
    });
    expect((await request(`${base()}/down.bin`, { headers: bearer(key) })).status).toBe(404);
    expect(await blobNames(nginx.root)).not.toContain(sha256(small));
  });

  it('nginx stopped during an upload: a clear 502, no catalog row, no blob, no temporary', async () => {
    const data = randomContent(40 * MiB);
    let sent = 0;
    let stopped: Promise<void> | undefined;
    async function* slowBody() {
      for (let offset = 0; offset < data.length; offset += MiB) {
        if (offset === 8 * MiB) stopped = nginx.stop();
        if (offset >= 8 * MiB) await sleep(20);
        sent += MiB;
        yield data.subarray(offset, offset + MiB);
      }
    }
    const res = await request(`${base()}/cut.bin`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(data.length) },
      body: slowBody(),
    }).catch((err: Error) => ({
      status: -1,
      body: Buffer.from(JSON.stringify({ message: err.message })),
      headers: {},
    }));
    await stopped;
    await nginx.start();
    await storeBack();
    if (res.status !== -1) {
      expect(res.status, `gateway log tail:\n${gw.logs().split('\n').slice(-12).join('\n')}`).toBe(502);
      expect(json(res)).toMatchObject({ code: 'upstream_unreachable' });
    }
    // Either way the gateway said why, with the stable code.
    await expect
      .poll(() =>
        gw.logLines().some((l) => l.code === 'upstream_unreachable' && String(l.route).endsWith('/artifacts/:id')),
      )
      .toBe(true);
    expect(sent).toBeLessThan(data.length + 1);
    expect((await request(`${base()}/cut.bin`, { headers: bearer(key) })).status).toBe(404);
    expect(await blobNames(nginx.root)).not.toContain(sha256(data));
    expect(await tmpFiles(nginx.root)).toEqual([]);
  });

  it('nginx down when a multipart upload is completed: it stays completing with its parts, and publishes byte-exact once nginx is back', async () => {
    const up = `${gw.url}/api/v1/repositories/st`;
    const parts = [randomContent(256 * 1024), randomContent(100_000)];
    const upload = await openUploadWithParts(up, 'parted.bin', key, parts);
    const session = async () => json(await request(`${up}/uploads/${upload}`, { headers: bearer(key) }));
    let seen: Record<string, unknown> = {};
    await withStoreDown(async () => {
      const completed = await request(`${up}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
      });
      expect(completed.status, completed.body.toString()).toBe(202);
      await waitUntil(
        async () => {
          seen = await session();
          return seen.error !== null || seen.state !== 'completing';
        },
        { what: 'the first assembly attempt', timeoutMs: 20_000 },
      );
      // Before, the unreachable store failed the upload for good and removed its parts.
      expect(seen).toMatchObject({
        state: 'completing',
        error: expect.stringMatching(/^(upstream_unreachable|store_unreachable): /),
      });
      expect((seen.parts as unknown[]).length).toBe(2);
      expect(await entries(path.join(nginx.root, 'uploads', upload))).toHaveLength(2);
    });
    await waitUntil(async () => ((seen = await session()), seen.state !== 'completing'), {
      what: 'the completion',
      timeoutMs: 30_000,
    });
    expect(seen).toMatchObject({ state: 'done', error: null });
    // Its parts are removed just after the outcome is recorded.
    await expect.poll(async () => (await session()).parts, { timeout: 10_000 }).toEqual([]);
    const back = await request(`${base()}/parted.bin/content`, { headers: bearer(key) });
    expect(back.status).toBe(200);
    expect(sha256(back.body)).toBe(sha256(Buffer.concat(parts)));
    expect(await tmpFiles(nginx.root)).toEqual([]);
  });

  it('an upload to a store that stalls is backpressured (bounded gateway memory); when it resumes the upload completes', async () => {
    const data = randomContent(200 * MiB);
    const rssBefore = await rssBytes(gw.child.pid!);
    let peak = 0;
    let offered = 0;
    await nginx.freeze();
    let thawed = false;
    async function* body() {
      for (let offset = 0; offset < data.length; offset += MiB) {
        offered += MiB;
        peak = Math.max(peak, await rssBytes(gw.child.pid!));
        yield data.subarray(offset, offset + MiB);
      }
    }
    const done = request(`${base()}/stall.bin`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(data.length), 'content-digest': contentDigest(data) },
      body: body(),
    });
    // While nginx is frozen the client cannot push the whole body through the gateway.
    await sleep(1500);
    const offeredWhileFrozen = offered;
    peak = Math.max(peak, await rssBytes(gw.child.pid!));
    await nginx.thaw();
    thawed = true;
    const res = await done;
    expect(thawed).toBe(true);
    expect(res.status, res.body.toString()).toBe(201);
    expect(offeredWhileFrozen).toBeLessThan(64 * MiB);
    expect(peak - rssBefore).toBeLessThan(64 * MiB);
    expect(json(res)).toMatchObject({ sha256: sha256(data) });
  });

  it('arkvory doctor checks the storage-id object on the store, and says when the store is down', async () => {
    const env = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_DATA_DIR: gw.dataDir,
      ARKVORY_STORAGE_URL: nginx.url,
      ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '500',
    };
    const ok = await runCli(['doctor'], env);
    expect(ok.stdout).toMatch(
      new RegExp(`ok +storage: ${nginx.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} and the database are both storage`),
    );
    await withStoreDown(async () => {
      const down = await runCli(['doctor'], env);
      expect(down.stdout).toMatch(/FAIL +storage: .*could not be reached/);
    });
  });

  it('a store that accepts connections but never answers: 504 upstream_timeout', async () => {
    await nginx.stop();
    const silent = net.createServer(() => {});
    await new Promise<void>((r) => silent.listen(nginx.port, '127.0.0.1', r));
    onTestFinished(async () => {
      await new Promise<void>((r) => silent.close(() => r()));
      for (const socket of sockets) socket.destroy();
    });
    const sockets: net.Socket[] = [];
    silent.on('connection', (s) => sockets.push(s));
    try {
      const res = await request(`${base()}/big.bin/content`, { headers: { ...bearer(key), range: 'bytes=0-9' } });
      expect(res.status).toBe(504);
      expect(json(res)).toMatchObject({ code: 'upstream_timeout' });
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
      await nginx.start();
    }
    await storeBack();
    const ok = await request(`${base()}/big.bin/content`, { headers: { ...bearer(key), range: 'bytes=0-9' } });
    expect(ok.body.equals(big.subarray(0, 10))).toBe(true);
  });
});

describe('a static store without WebDAV MOVE, and multipart uploads on the store', () => {
  const db = useTestDatabase();

  it('publishes through the PUT-to-final-name fallback; multipart parts are staged on the store and assembled by the worker', async () => {
    await createRepository(db.pool, 'nm');
    const { key } = await createServiceAccount(db.pool, { grants: { nm: 'write' } });
    const nginx = await startStaticStore({ move: false });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_STORAGE_URL: nginx.url } });
    const repo = `${gw.url}/api/v1/repositories/nm`;

    const data = randomContent(3 * MiB + 7);
    const put = await request(`${repo}/artifacts/plain.bin`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-digest': contentDigest(data) },
      body: data,
    });
    expect(put.status, put.body.toString()).toBe(201);
    const hex = sha256(data);
    expect(
      (await readFile(path.join(nginx.root, 'blobs', 'sha256', hex.slice(0, 2), hex.slice(2, 4), hex))).equals(data),
    ).toBe(true);
    expect(await tmpFiles(nginx.root)).toEqual([]);
    // The same bytes again: 200, one blob; a MOVE was tried once and answered 405.
    expect(
      (await request(`${repo}/artifacts/plain.bin`, { method: 'PUT', headers: bearer(key), body: data })).status,
    ).toBe(200);
    expect(
      (await nginx.accessLog()).split('\n').filter((l) => l.startsWith('405 ') && l.includes('MOVE')),
    ).toHaveLength(1);

    // Multipart: three parts land under uploads/<session>/ on the store, the worker assembles them.
    const file = randomContent(9 * MiB + 3);
    const parts = [file.subarray(0, 4 * MiB), file.subarray(4 * MiB, 8 * MiB), file.subarray(8 * MiB)];
    const upload = await openUploadWithParts(repo, 'multi.bin', key, parts, {
      size: file.length,
      sha256: sha256(file),
    });
    expect(await entries(path.join(nginx.root, 'uploads', upload))).toHaveLength(3);
    const done = await request(`${repo}/uploads/${upload}/complete`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
    });
    expect(done.status, done.body.toString()).toBe(202);
    await expect
      .poll(async () => json(await request(`${repo}/uploads/${upload}`, { headers: bearer(key) })).state, {
        timeout: 30_000,
      })
      .toBe('done');
    const got = await request(`${repo}/artifacts/multi.bin/content`, {
      headers: { ...bearer(key), range: `bytes=${4 * MiB - 5}-${4 * MiB + 4}` },
    });
    expect(got.status).toBe(206);
    expect(got.body.equals(file.subarray(4 * MiB - 5, 4 * MiB + 5))).toBe(true);
    expect(sha256((await request(`${repo}/artifacts/multi.bin/content`, { headers: bearer(key) })).body)).toBe(
      sha256(file),
    );
    expect(await entries(path.join(nginx.root, 'uploads', upload))).toEqual([]);
    expect(await tmpFiles(nginx.root)).toEqual([]);
  });
});

describe('the writer killed during an upload to the static store', () => {
  const db = useTestDatabase();

  it('kill -9 in the middle of a 30 MiB upload: no row, no blob, no temporary on the store; the retry succeeds', async () => {
    await createRepository(db.pool, 'crash');
    const { key } = await createServiceAccount(db.pool, { grants: { crash: 'write' } });
    const nginx = await startStaticStore();
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_STORAGE_URL: nginx.url, ARKVORY_LOG_LEVEL: 'warn' };
    const gw = await startGateway({ env, timeoutMs: 60_000 });
    const data = randomContent(30 * MiB);
    let killed = false;
    async function* slowBody() {
      for (let offset = 0; offset < data.length; offset += MiB) {
        if (offset === 10 * MiB) {
          gw.child.kill('SIGKILL');
          killed = true;
          await gw.exited;
        }
        yield data.subarray(offset, offset + MiB);
      }
    }
    const upload = await request(`${gw.url}/api/v1/repositories/crash/artifacts/big`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-length': String(data.length) },
      body: slowBody(),
    }).catch((err: Error) => err);
    expect(killed).toBe(true);
    expect(upload).toBeInstanceOf(Error);
    // nginx drops a chunked PUT whose client went away: nothing reaches tmp/ or blobs/.
    await expect.poll(async () => (await nginx.accessLog()).includes('PUT /arkvory/tmp/')).toBe(true);
    expect(await tmpFiles(nginx.root)).toEqual([]);
    expect(await blobNames(nginx.root)).toEqual([]);
    expect((await db.pool.query("SELECT 1 FROM arkvory_artifacts WHERE repository = 'crash'")).rowCount).toBe(0);

    const restarted = await startGateway({ env, dataDir: gw.dataDir, timeoutMs: 60_000 });
    const retry = await request(`${restarted.url}/api/v1/repositories/crash/artifacts/big`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-digest': contentDigest(data) },
      body: data,
    });
    expect(retry.status).toBe(201);
    expect(await blobNames(nginx.root)).toEqual([sha256(data)]);
  }, 120_000);
});

describe('gateways on different hosts sharing one static store', () => {
  const db = useTestDatabase();

  it('a writer, a reader and a separate worker, each with its own data dir, serve and complete through the same nginx', async () => {
    await createRepository(db.pool, 'multi');
    const { key } = await createServiceAccount(db.pool, { grants: { multi: 'write' } });
    const nginx = await startStaticStore();
    const shared = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_REDIS_URL: inject('redisUrl'),
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(256 * MiB),
      ARKVORY_STORAGE_URL: nginx.url,
    };
    const writer = await startGateway({
      env: { ...shared, ARKVORY_GATEWAY_SLOT: '0', ARKVORY_EMBEDDED_WORKER: '0' },
      dataDir: await makeTempDir(),
    });
    const reader = await startGateway({
      env: { ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' },
      dataDir: await makeTempDir(),
    });
    await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_ROLE: 'worker', ARKVORY_STORAGE_URL: nginx.url },
      dataDir: await makeTempDir(),
      waitFor: 'listening',
    });

    const data = randomContent(5 * MiB + 1);
    expect(
      (
        await request(`${writer.url}/api/v1/repositories/multi/artifacts/a.bin`, {
          method: 'PUT',
          headers: bearer(key),
          body: data,
        })
      ).status,
    ).toBe(201);
    const range = await request(`${reader.url}/api/v1/repositories/multi/artifacts/a.bin/content`, {
      headers: { ...bearer(key), range: 'bytes=100-199,-50' },
    });
    expect(range.status).toBe(206);
    const ranged = parseMultipart(range.body, range.headers['content-type']!);
    expect(
      Buffer.concat(ranged.map((p) => p.data)).equals(
        Buffer.concat([data.subarray(100, 200), data.subarray(data.length - 50)]),
      ),
    ).toBe(true);
    // A small body: the reader refuses at once and may close before a large one is sent (EPIPE).
    expect(
      (
        await request(`${reader.url}/api/v1/repositories/multi/artifacts/b.bin`, {
          method: 'PUT',
          headers: bearer(key),
          body: Buffer.from('x'),
        })
      ).status,
    ).toBe(405);

    const parts = [data.subarray(0, 3 * MiB), data.subarray(3 * MiB)];
    const upload = await openUploadWithParts(`${writer.url}/api/v1/repositories/multi`, 'm.bin', key, parts);
    const done = await request(`${writer.url}/api/v1/repositories/multi/uploads/${upload}/complete`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
    });
    expect(done.status).toBe(202);
    await expect
      .poll(
        async () =>
          json(await request(`${writer.url}/api/v1/repositories/multi/uploads/${upload}`, { headers: bearer(key) }))
            .state,
        { timeout: 30_000 },
      )
      .toBe('done');
    const got = await request(`${reader.url}/api/v1/repositories/multi/artifacts/m.bin/content`, {
      headers: bearer(key),
    });
    expect(sha256(got.body)).toBe(sha256(data));
  }, 120_000);
});

describe('bandwidth governors on the static store', () => {
  const db = useTestDatabase();

  it('the download and upload governors pace bytes through the static store', async () => {
    const rate = 512 * 1024;
    await createRepository(db.pool, 'st');
    const { key } = await createServiceAccount(db.pool, { grants: { st: 'write' } });
    const nginx = await startStaticStore();
    const paced = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_STORAGE_URL: nginx.url,
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(rate),
        ARKVORY_UPLOAD_BYTES_PER_SECOND: String(rate),
      },
    });
    const stored = randomContent(2 * MiB);
    // The upload is paced too: 2 MiB at 512 KiB/s takes about 4 s.
    const t0 = performance.now();
    expect(
      (
        await request(`${paced.url}/api/v1/repositories/st/artifacts/big.bin`, {
          method: 'PUT',
          headers: bearer(key),
          body: stored,
        })
      ).status,
    ).toBe(201);
    expect((performance.now() - t0) / 1000).toBeGreaterThan(3);
    const started = performance.now();
    let bytes = 0;
    let firstByte: number | undefined;
    await new Promise<void>((resolve) => {
      const socket = net.connect(paced.port, '127.0.0.1');
      socket.on('data', (d: Buffer) => {
        firstByte ??= performance.now();
        bytes += d.length;
      });
      socket.on('close', () => resolve());
      socket.on('error', () => {});
      socket.write(
        `GET /api/v1/repositories/st/artifacts/big.bin/content HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\n\r\n`,
      );
      setTimeout(() => socket.destroy(), 2500);
    });
    const ended = performance.now();
    const seconds = (ended - started) / 1000;
    expect(bytes).toBeLessThanOrEqual(rate * seconds + rate / 10 + 4096);
    // The rate is reached from the first byte on: at least 60 % of rate × time + burst. The governor
    // guarantees it within a quantum and 1 ms of rate on an injected clock; through the static store
    // each chunk is fetched from nginx before it is charged, and at this rate the bucket holds one
    // quantum, so a fetch stalled past 100 ms loses refill. On this 2-core machine at load average
    // 14–19 three runs measured 77–79 % (the directory store's path 85–98 %, transfers.int.test.ts);
    // the floor leaves room for a worse stall. The response head counts in `bytes`; it is small.
    const pace = bytes / ((rate * (ended - firstByte!)) / 1000 + rate / 10);
    if (process.env.ARKVORY_PACING_REPORT) console.log(`static store download pace: ${(pace * 100).toFixed(1)} %`);
    expect(pace).toBeGreaterThan(0.6);
  });
});
