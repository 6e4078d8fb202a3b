/**
 * Fault: a `bandwidth` toxic (100 KB/s) on the gateway↔static-HTTP store (nginx) link, under a
 * download governed at 256 KiB/s. Expected: the client gets exactly the file, paced by the slower of
 * the two, never more than the governor's rate·t + burst (and never faster than the link allows).
 * Recovery: the toxic removed, the next download is paced by the governor alone, with the same bound.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomContent, sha256 } from '../test/support/content.ts';
import type { GatewayProcess } from '../test/support/gateway.ts';
import { addToxic, type ProxiedUpstream } from './support/toxiproxy.ts';
import { waitUntil } from '../test/harness/index.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';
import { gatewayBehindStoreLink, type StoreLink } from './support/static-store-link.ts';

const KiB = 1024;
const RATE = 256 * KiB;
/** floor(min(rate / 10, 1 MiB)): the bucket starts full (docs/bandwidth-and-admission.md). */
const BURST = Math.floor(RATE / 10);
/** toxiproxy's `rate` is in KB/s (1 KB = 1000 bytes). */
const LINK_KB_PER_SEC = 100;
const LINK_BYTES_PER_SEC = LINK_KB_PER_SEC * 1000;
/**
 * What can pass the toxic ahead of its pace: toxiproxy reads at most 32 KiB per chunk and the toxic
 * delays a chunk after reading it, so at most one chunk is early.
 */
const LINK_SLACK = 32 * KiB;
const file = randomContent(384 * KiB);
const contentPath = '/api/v1/repositories/chaos/artifacts/slow-store.bin/content';

const chaos = useToxiproxyAndDatabase();
let setup: StoreLink;
let link: ProxiedUpstream;
let gateway: GatewayProcess;

beforeAll(async () => {
  setup = await gatewayBehindStoreLink(
    chaos,
    { ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(RATE) },
    { name: 'slow-store.bin', file },
  );
  ({ link, gateway } = setup);
}, 120_000);

afterAll(() => setup?.stop());

interface Arrival {
  /** ms since the request was sent (performance.now, the same monotonic clock the gateway paces by). */
  atMs: number;
  /** Bytes received up to and including this chunk. */
  total: number;
}

/** GET that records when each chunk arrived, measured from the moment the request was sent. */
function timedDownload(): Promise<{ status: number; body: Buffer; arrivals: Arrival[]; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const sentAt = performance.now();
    const req = http.get(
      `${gateway.url}${contentPath}`,
      { headers: { authorization: `Bearer ${chaos.key}` }, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        const arrivals: Arrival[] = [];
        let total = 0;
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          total += chunk.length;
          arrivals.push({ atMs: performance.now() - sentAt, total });
        });
        res.on('error', reject);
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), arrivals, complete: res.complete }),
        );
      },
    );
    req.on('error', reject);
  });
}

/** Arrivals above `rate`·t + `allowance` (t in s since the request was sent). */
function aboveBound(arrivals: Arrival[], rate: number, allowance: number): Arrival[] {
  return arrivals.filter((a) => a.total > (rate * a.atMs) / 1000 + allowance);
}

describe('a bandwidth-limited link to the static-HTTP store', () => {
  it('delivers exactly the file, governed and paced by the link; after the toxic is removed, by the governor alone', async () => {
    const toxic = await addToxic(link, 'bandwidth', 'downstream', { rate: LINK_KB_PER_SEC }, 'slow-store');
    const slow = await timedDownload();
    await toxic.remove();
    expect(slow.status).toBe(200);
    expect(slow.complete).toBe(true);
    expect(sha256(slow.body)).toBe(sha256(file));
    // Governed: the gateway never handed out more than rate·t + burst.
    expect(aboveBound(slow.arrivals, RATE, BURST)).toEqual([]);
    // Paced by the link: never faster than the toxic lets bytes through, so the toxic really acted
    // (without it the download would take (size − burst) / rate ≈ 1.4 s).
    expect(aboveBound(slow.arrivals, LINK_BYTES_PER_SEC, LINK_SLACK)).toEqual([]);
    expect(slow.arrivals.at(-1)!.atMs).toBeGreaterThanOrEqual(((file.length - LINK_SLACK) / LINK_BYTES_PER_SEC) * 1000);

    // The toxic gone: the governor alone paces, with the same bound, and the bytes are still exact.
    const fast = await timedDownload();
    expect([fast.status, fast.complete]).toEqual([200, true]);
    expect(sha256(fast.body)).toBe(sha256(file));
    expect(aboveBound(fast.arrivals, RATE, BURST)).toEqual([]);
    expect(fast.arrivals.at(-1)!.atMs).toBeGreaterThanOrEqual(((file.length - BURST) / RATE) * 1000);
    // Both downloads ended well: logged as completed, nothing logged as our error.
    const downloads = () =>
      gateway
        .logLines()
        .filter(
          (l) =>
            l.msg === 'request' && typeof l.route === 'string' && l.route.endsWith('/content') && l.method === 'GET',
        );
    // The request line is written when the response closes, which may follow the client's 'end'.
    await waitUntil(() => downloads().length === 2, {
      timeoutMs: 5000,
      intervalMs: 20,
      what: 'both downloads to be logged',
    });
    expect(downloads().map((l) => [l.status, l.completed])).toEqual([
      [200, true],
      [200, true],
    ]);
    expect(gateway.logLines().filter((l) => Number(l.level) >= 50)).toEqual([]);
  }, 60_000);
});
