/**
 * A client that goes away while the slice cache waits for a silent store (a gateway in front of
 * nginx WebDAV through a relay that stops passing the store's bytes on): the fills it started are
 * let go at once, their store connection closed, not held until ARKVORY_STORAGE_TIMEOUT_SECONDS.
 */
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { startStoreBacking, type StoreBacking } from '../../test/support/store-kinds.ts';

const MiB = 1024 * 1024;
/** Far longer than the test waits: a connection still open then is held until this ends. */
const STORAGE_TIMEOUT_SECONDS = 120;

/**
 * A relay to the store that passes on the first `passBytes` of each of its answers, then holds the
 * rest back: the store has gone silent, its connection still open.
 */
async function silencingLink(port: number, passBytes: number) {
  const open = new Set<net.Socket>();
  const server = net.createServer((gateway) => {
    const store = net.connect(port, '127.0.0.1');
    open.add(gateway);
    gateway.pipe(store);
    let passed = 0;
    store.on('data', (chunk: Buffer) => {
      const n = Math.max(0, Math.min(chunk.length, passBytes - passed));
      passed += n;
      if (n > 0) gateway.write(chunk.subarray(0, n));
    });
    const close = () => {
      open.delete(gateway);
      gateway.destroy();
      store.destroy();
    };
    gateway.on('close', close).on('error', close);
    store.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => {
    for (const s of open) s.destroy();
    server.close();
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    /** Connections from the gateway still open. */
    open: () => open.size,
  };
}

async function metric(gw: GatewayProcess, name: string): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ').at(-1)) : Number.NaN;
}

describe('slice cache fills of a client gone while the store is silent (nginx WebDAV)', () => {
  const db = useTestDatabase();
  let backing: StoreBacking;
  let key: string;

  beforeAll(async () => {
    backing = await startStoreBacking('http');
    await createRepository(db.pool, 'rs');
    ({ key } = await createServiceAccount(db.pool, { grants: { rs: 'write' } }));
  });
  afterAll(async () => {
    await backing?.stop();
  });

  it('are let go when the client resets, with their store connection', async () => {
    const storeUrl = new URL(backing.nginx!.url);
    const cacheDir = await makeTempDir('arkvory-slice-reset-');
    const env = (storage: string) => ({
      ARKVORY_DATABASE_URL: db.url,
      ...backing.env,
      ARKVORY_STORAGE_URL: storage,
      ARKVORY_STORAGE_TIMEOUT_SECONDS: String(STORAGE_TIMEOUT_SECONDS),
      // The store probe would open connections of its own through the link.
      ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: '60000',
      ARKVORY_CACHE_DIR: cacheDir,
      ARKVORY_CACHE_SLICE_BYTES: String(MiB),
      ARKVORY_CACHE_MIN_FREE_BYTES: '0',
      ARKVORY_BLOB_CACHE_BYTES: '0',
    });
    let gw = await startGateway({ env: env(backing.nginx!.url) });
    const url = `${gw.url}/api/v1/repositories/rs/artifacts/big.bin`;
    expect((await request(url, { method: 'PUT', headers: bearer(key), body: randomContent(16 * MiB) })).status).toBe(
      201,
    );
    await gw.stop();

    // A cold read through a store that goes silent after the first slice and a half of its answer
    // (the first slices and the readahead, one ranged GET): the client has the first slice, waits
    // for the second, and resets.
    const link = await silencingLink(backing.nginx!.port, MiB + MiB / 2);
    storeUrl.host = `127.0.0.1:${link.port}`;
    gw = await startGateway({ env: env(storeUrl.toString()) });
    const content = `${gw.url}${new URL(url).pathname}/content`;
    const req = http.get(content, { headers: bearer(key) });
    req.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      req.on('error', reject);
      req.on('response', (res) => {
        expect(res.statusCode).toBe(200);
        let received = 0;
        res.on('error', () => {});
        res.on('data', (chunk: Buffer) => {
          received += chunk.length;
          if (received > MiB + 64 * 1024) resolve();
        });
      });
    });
    expect(await metric(gw, 'arkvory_slice_cache_fills_in_flight')).toBeGreaterThan(0);
    expect(link.open()).toBeGreaterThan(0);
    req.destroy();

    await waitUntil(async () => link.open() === 0 && (await metric(gw, 'arkvory_slice_cache_fills_in_flight')) === 0, {
      what: 'the fills of the client gone, and their store connection, to be let go',
      timeoutMs: 20_000,
      intervalMs: 50,
    });
    expect(await metric(gw, 'arkvory_slice_cache_abandoned_fills_total')).toBeGreaterThan(0);
    expect(await gw.stop()).toBe(0);
  }, 120_000);
});
