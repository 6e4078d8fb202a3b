/**
 * A router instance of two worker processes (ARKVORY_ROLE=router, ARKVORY_WORKERS=2) in front of a
 * real writer, over real sockets: each worker is a whole router on the shared port; one scrape on
 * the metrics port sums the workers; a worker killed with SIGKILL leaves the other's transfers
 * whole and is replaced; SIGTERM drains both and the instance exits 0, once.
 */
import { createHash } from 'node:crypto';
import net from 'node:net';
import type { Client } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort, waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import {
  connectionsOnBothWorkers,
  requestRetried,
  waitForWorkers,
  workerPid,
} from '../../test/support/worker-instance.ts';

const KiB = 1024;
/** The writer paces each principal so that a download lasts about 3 s: time to kill a worker. */
const PER_PRINCIPAL = 512 * KiB;
const file = randomContent(3 * PER_PRINCIPAL);
const digest = createHash('sha256').update(file).digest('hex');
const contentPath = '/api/v1/repositories/rw/artifacts/f.bin/content';

const db = useTestDatabase();
let writer: GatewayProcess;
let router: GatewayProcess;
let metricsPort: number;
let writeKey: string;
const clients: Client[] = [];

beforeAll(async () => {
  await createRepository(db.pool, 'rw');
  ({ key: writeKey } = await createServiceAccount(db.pool, { grants: { rw: 'write' } }));
  writer = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(PER_PRINCIPAL) },
  });
  metricsPort = await freeLoopbackPort();
  router = await startGateway({
    env: {
      ARKVORY_ROLE: 'router',
      ARKVORY_ROUTER_BACKENDS: writer.url,
      ARKVORY_ROUTER_PROBE_INTERVAL_MILLISECONDS: '500',
      ARKVORY_METRICS_PORT: String(metricsPort),
      ARKVORY_WORKERS: '2',
    },
  });
  await waitForWorkers(router, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
}, 90_000);

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

afterAll(async () => {
  // The router first: a gateway stopping under its probes is rightly a warning in its log.
  await router?.stop('SIGTERM');
  await writer?.stop('SIGTERM');
});

async function scrape(): Promise<string> {
  return (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
}

function sample(text: string, series: string): number {
  const escaped = series.replace(/[{}"=]/g, (c) => `\\${c}`);
  const line = new RegExp(`^${escaped} (\\S+)$`, 'm').exec(text);
  if (!line) throw new Error(`no ${series} in the scrape`);
  return Number(line[1]);
}

/** A head the router refuses before forwarding (two Host headers), on a new connection. */
function duplicateHost(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () =>
      socket.end(`GET ${contentPath} HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n`),
    );
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0)));
  });
}

/** A download of the file over `client`: the sha256 of what arrived, or the error that cut it. */
function download(client: Client, key: string): { streaming: Promise<void>; done: Promise<string | Error> } {
  const streaming = Promise.withResolvers<void>();
  const done = (async () => {
    try {
      const res = await client.request({ path: contentPath, method: 'GET', headers: bearer(key) });
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${await res.body.text()}`);
      const hash = createHash('sha256');
      for await (const chunk of res.body) {
        hash.update(chunk as Buffer);
        streaming.resolve();
      }
      return hash.digest('hex');
    } catch (err) {
      streaming.resolve();
      return err as Error;
    }
  })();
  return { streaming: streaming.promise, done };
}

describe('a router instance of two workers', () => {
  it('each worker is a whole router: a write through one reaches the writer, reads through both come back byte-exact', async () => {
    const [first, second] = await connectionsOnBothWorkers(router.url, clients, 1);
    const put = await first!.client.request({
      path: '/api/v1/repositories/rw/artifacts/f.bin',
      method: 'PUT',
      headers: bearer(writeKey),
      body: file,
    });
    await put.body.dump();
    expect([200, 201]).toContain(put.statusCode);
    for (const { client, worker } of [first!, second!]) {
      const res = await client.request({ path: contentPath, method: 'GET', headers: bearer(writeKey) });
      const body = Buffer.from(await res.body.arrayBuffer());
      expect(res.statusCode, `worker ${worker}`).toBe(200);
      expect(createHash('sha256').update(body).digest('hex'), `worker ${worker}`).toBe(digest);
    }
  }, 30_000);

  it('one scrape for the instance: its workers counted, client faults summed over both, the gateways shown once', async () => {
    const before = await scrape();
    expect(sample(before, 'arkvory_workers{state="serving"}')).toBe(2);
    expect(sample(before, 'arkvory_worker_restarts_total')).toBe(0);
    // Each worker knows the one writer: the instance shows it once, not once per worker.
    expect(sample(before, 'arkvory_router_gateways{state="reads"}')).toBe(1);
    const counted = sample(before, 'arkvory_router_client_faults_total{kind="duplicate_host"}');
    const N = 60;
    const statuses = await Promise.all(Array.from({ length: N }, () => duplicateHost(router.port)));
    expect(statuses).toEqual(statuses.map(() => 400));
    // The kernel spread the connections over both workers; each counted its own. (Their lines cross
    // the workers' and the primary's pipes after the answers: waited for.)
    const byWorker = () =>
      new Set(
        router
          .logLines()
          .filter((l) => l.kind === 'duplicate_host')
          .map((l) => l.worker),
      );
    await waitUntil(() => byWorker().size === 2, { timeoutMs: 5_000, what: "both workers' fault lines" }).catch(
      () => {},
    );
    expect([...byWorker()].sort()).toEqual([0, 1]);
    expect(sample(await scrape(), 'arkvory_router_client_faults_total{kind="duplicate_host"}')).toBe(counted + N);
  });

  it('kill -9 of one worker: the other worker’s downloads finish byte-exact, a replacement serves', async () => {
    const connections = await connectionsOnBothWorkers(router.url, clients, 1);
    const readers = await Promise.all(
      connections.map(() => createServiceAccount(db.pool, { scopes: ['read'], grants: { rw: 'read' } })),
    );
    const runs = connections.map((c, i) => ({ ...c, ...download(c.client, readers[i]!.key) }));
    await Promise.all(runs.map((r) => r.streaming));
    process.kill(await workerPid(router, 1), 'SIGKILL');
    const results = await Promise.all(runs.map((r) => r.done));
    expect(results[0], 'the download on the surviving worker').toBe(digest);
    expect(results[1], 'the download on the killed worker').toBeInstanceOf(Error);
    const after = await waitForWorkers(router, (s) =>
      s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
    );
    expect(after.workers).toHaveLength(2);
    expect(sample(await scrape(), 'arkvory_worker_restarts_total')).toBe(1);
    const again = await requestRetried(router, `${router.url}${contentPath}`, { headers: bearer(readers[0]!.key) });
    expect(again.status).toBe(200);
    expect(createHash('sha256').update(again.body).digest('hex')).toBe(digest);
  }, 60_000);

  it('SIGTERM: both workers drain their downloads whole and the instance exits 0, once', async () => {
    const connections = await connectionsOnBothWorkers(router.url, clients, 1);
    const readers = await Promise.all(
      connections.map(() => createServiceAccount(db.pool, { scopes: ['read'], grants: { rw: 'read' } })),
    );
    const runs = connections.map((c, i) => download(c.client, readers[i]!.key));
    await Promise.all(runs.map((r) => r.streaming));
    router.child.kill('SIGTERM');
    expect(await Promise.all(runs.map((r) => r.done))).toEqual([digest, digest]);
    expect(await router.exited).toBe(0);
    const stopped = router.logLines().filter((l) => l.msg === 'stopped');
    expect(stopped.filter((l) => l.component === 'workers')).toHaveLength(1);
    const byWorker = stopped.filter((l) => l.worker !== undefined);
    expect(byWorker.map((l) => l.worker).sort()).toEqual([0, 1]);
    expect(byWorker.every((l) => l.code === 0)).toBe(true);
  }, 60_000);
});
