/**
 * Fault: 600 ms of latency on the gateway↔static-HTTP store (nginx) link while clients reset their
 * downloads of a repository bounded to one transfer at a time, each before the store answered.
 * Expected: a reset request holds none of the repository's transfers (its hold is taken after the
 * store answered, when the client had already gone); once the link is clean, the next download is
 * served, not 429 `busy`.
 */
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomContent, sha256 } from '../test/support/content.ts';
import { runCli, type GatewayProcess } from '../test/support/gateway.ts';
import { call } from './support/gateways.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';
import { gatewayBehindStoreLink, type StoreLink } from './support/static-store-link.ts';
import { addLatency, type ProxiedUpstream } from './support/toxiproxy.ts';

const LATENCY_MS = 600;
const file = randomContent(64 * 1024);
const contentPath = '/api/v1/repositories/chaos/artifacts/bounded.bin/content';

const chaos = useToxiproxyAndDatabase();
let setup: StoreLink;
let link: ProxiedUpstream;
let gateway: GatewayProcess;

beforeAll(async () => {
  const ceiling = await runCli(['repos', 'ceiling', 'chaos', '--max-transfers', '1'], {
    ARKVORY_DATABASE_URL: chaos.db.url,
  });
  expect(ceiling.code, ceiling.stderr).toBe(0);
  // Every read goes to the store: no copy in memory answers before the link's latency.
  setup = await gatewayBehindStoreLink(chaos, { ARKVORY_BLOB_CACHE_BYTES: '0' }, { name: 'bounded.bin', file });
  ({ link, gateway } = setup);
}, 120_000);

afterAll(() => setup?.stop());

/** Sends a GET and resets the connection after `afterMs`, before the slow store answered. */
async function resetDownload(afterMs: number): Promise<void> {
  const socket = net.connect(gateway.port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write(`GET ${contentPath} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${chaos.key}\r\n\r\n`);
  await sleep(afterMs);
  socket.resetAndDestroy();
}

describe('a repository transfer bound under a slow store', () => {
  it('a download reset before the store answered gives its transfer back', async () => {
    const toxic = await addLatency(link, { name: 'slow-store', stream: 'downstream', latencyMs: LATENCY_MS });
    try {
      for (let i = 0; i < 3; i++) await resetDownload(150);
      // Each reset request's store read answers meanwhile; only then does it ask for the repository's transfer.
      await sleep(LATENCY_MS * 3);
    } finally {
      await toxic.remove();
    }
    const next = await call(`${gateway.url}${contentPath}`, { key: chaos.key });
    expect(next.status, `${next.code}: the reset downloads kept the repository's only transfer`).toBe(200);
    expect(sha256(next.body)).toBe(sha256(file));
    // The reset requests did reach the route and end there as clients gone.
    const line = gateway.logLines().find((l) => l.code === 'client_aborted');
    expect(line, 'a reset download is logged as the client leaving').toBeDefined();
  }, 60_000);
});
