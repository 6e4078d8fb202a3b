/**
 * Fault: 20 s of latency on the reader→PostgreSQL direction of the reader's whole database link, while a download runs.
 * Expected: the reader fences at its permit's end, 8 s after its last confirmed renewal started: the transfer ends,
 * new requests get 503 lease_lost, /health/status 503. Recovery: the client resumes with Range through the writer.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { request, sha256 } from '../test/support/content.ts';
import type { GatewayProcess } from '../test/support/gateway.ts';
import { awaitLogLine, call, leaseRow, logTimeMs, startDownload } from './support/gateways.ts';
import { release, useLinkedCluster } from './support/shared-cluster.ts';
import { addLatency, type ProxiedUpstream } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';

const KiB = 1024;
const SLOTS = 2;
/** The writer's share is 1 MiB/s (a fast resume); the reader is held to 128 KiB/s locally. */
const RATE = SLOTS * 1024 * KiB;
const READER_BYTES_PER_SEC = 128 * KiB;
/** 16 s at the reader's rate: still running when the reader must fence (≤ 8 s after the toxic). */
const FILE_BYTES = 2048 * KiB;
/** Far above the 8 s permit: no renewal sent under the toxic can be confirmed in time. */
const LATENCY_MS = 20_000;
const PERMIT_MS = 8_000;

const cluster = useLinkedCluster({
  slots: SLOTS,
  rateBytesPerSec: RATE,
  fileBytes: FILE_BYTES,
  parked: [{ slot: 1, env: { ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(READER_BYTES_PER_SEC) } }],
});
let link: ProxiedUpstream;
let reader: GatewayProcess;

beforeAll(() => {
  reader = cluster.parked[0]!;
  link = cluster.links[0]!;
});

describe('latency on the reader↔PostgreSQL link during a download', () => {
  it('fences the reader 8 s after its last confirmed renewal: the download ends, 503 lease_lost, and it resumes through the writer', async () => {
    try {
      await release(reader, link);
      await fenceDuringDownload();
    } finally {
      // Before the reader stops: its goodbye to PostgreSQL would otherwise wait out the latency.
      await link.proxy.remove();
    }
  }, 120_000);
});

async function fenceDuringDownload(): Promise<void> {
  const { file, key, writer, contentPath } = cluster;
  const download = await startDownload(`${reader.url}${contentPath}`, { authorization: `Bearer ${key}` });
  expect(download.status).toBe(200);
  await waitUntil(() => download.receivedBytes() >= 64 * KiB, {
    timeoutMs: 10_000,
    intervalMs: 2,
    what: 'the download to be under way',
  });

  const toxicAtMs = Date.now();
  await addLatency(link, { name: 'slow-requests', stream: 'upstream', latencyMs: LATENCY_MS });
  const ended = await Promise.race([
    download.ended,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error('the download was not cut within 12 s of the toxic')), 12_000),
    ),
  ]);

  // Requests are delayed on their way to PostgreSQL, so the row still holds the last renewal
  // that was confirmed: the one that reached the database before the toxic.
  const row = (await leaseRow(cluster.db.pool, 1))!;
  expect(row.renewedAtMs).toBeLessThanOrEqual(toxicAtMs + 50);
  // The client may see the cut before this process has read the fence's log line from the
  // gateway's stdout: the line was written first, its arrival here is not ordered with the socket's.
  const fenced = await awaitLogLine(reader, 'fenced:', { timeoutMs: 2000, what: "the reader's fence log line" });
  expect(fenced.reason).toBe('the lease permit expired before a renewal was confirmed');
  const fencedAtMs = logTimeMs(fenced);
  // The permit runs 8 s from the request start, which is at most a few ms before the database
  // stamped renewed_at; the expiry timer may fire late on a loaded machine, never early.
  expect(fencedAtMs).toBeGreaterThanOrEqual(row.renewedAtMs + PERMIT_MS - 250);
  expect(fencedAtMs).toBeLessThanOrEqual(row.renewedAtMs + PERMIT_MS + 1000);
  // No quantum after the fence: the last bytes were granted before it (they may sit briefly in
  // socket buffers), and the transfer ends with it.
  expect(ended.complete).toBe(false);
  expect(download.lastChunkAtMs()!).toBeLessThanOrEqual(fencedAtMs + 500);
  expect(download.lastChunkAtMs()!).toBeGreaterThan(toxicAtMs);
  expect(ended.endedAtMs).toBeLessThanOrEqual(fencedAtMs + 1500);

  const prefix = download.received();
  expect(prefix.length).toBeGreaterThan(64 * KiB);
  expect(prefix.length).toBeLessThan(file.length);
  expect(prefix.equals(file.subarray(0, prefix.length))).toBe(true);

  const again = await call(`${reader.url}${contentPath}`, { key });
  expect([again.status, again.code]).toEqual([503, 'lease_lost']);
  expect((await call(`${reader.url}/health/status`)).status).toBe(503);
  expect((await call(`${reader.url}/health/ready`, { key })).status).toBe(503);
  const metrics = (await call(`${reader.url}/metrics`)).body.toString();
  expect(metrics).toMatch(/^arkvory_lease_state\{state="fenced"\} 1$/m);
  expect(metrics).toMatch(/^arkvory_lease_fencing_events_total 1$/m);

  const rest = await request(`${writer.url}${contentPath}`, {
    headers: { authorization: `Bearer ${key}`, range: `bytes=${prefix.length}-` },
  });
  expect(rest.status).toBe(206);
  expect(rest.headers['content-range']).toBe(`bytes ${prefix.length}-${file.length - 1}/${file.length}`);
  expect(sha256(Buffer.concat([prefix, rest.body]))).toBe(sha256(file));
}
