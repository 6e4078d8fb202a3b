/**
 * Store health on a real gateway process with a directory store: its `storage-id` taken away (what a
 * lost mount looks like) makes the store unreachable within the detection bound (2 probe periods
 * plus one probe timeout, plus one period of slack for a loaded machine); meanwhile reads and
 * uploads answer 503 `store_unreachable` at once, `/health/status` stays 200 and names the state, the
 * last code and when, and the metric follows; with the file back it serves again after 2 passing probes.
 */
import { rename } from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { waitUntil } from '../../test/harness/index.ts';

const PROBE_MS = 300;
const db = useTestDatabase();
const file = randomContent(200_000);
let key: string;
let gw: GatewayProcess;
let dataDir: string;
const contentUrl = () => `${gw.url}/api/v1/repositories/sh/artifacts/f.bin/content`;

interface Status {
  status: string;
  store: { state: string; since: string; lastError: { code: string; at: string } | null };
}
const status = async (): Promise<{ code: number; body: Status }> => {
  const res = await request(`${gw.url}/health/status`);
  return { code: res.status, body: JSON.parse(res.body.toString()) as Status };
};

async function waitForState(state: string | ((state: string) => boolean), timeoutMs: number): Promise<void> {
  const holds = typeof state === 'string' ? (s: string) => s === state : state;
  await waitUntil(async () => holds((await status()).body.store.state), {
    what: `the store to become ${typeof state === 'string' ? state : 'another state'}`,
    timeoutMs,
    intervalMs: 10,
  });
}

/** The gateway's own time of its logged line `msg` (waited for: it crosses the stdout pipe after the change). */
async function loggedAt(msg: string): Promise<number> {
  let at = Number.NaN;
  await waitUntil(
    () => {
      const line = gw.logLines().find((l) => l.msg === msg);
      if (line) at = Date.parse(String(line.time));
      return line !== undefined;
    },
    { what: `the "${msg}" line`, timeoutMs: 10_000, process: gw },
  );
  return at;
}

beforeAll(async () => {
  await createRepository(db.pool, 'sh');
  ({ key } = await createServiceAccount(db.pool, { grants: { sh: 'write' } }));
  dataDir = await makeTempDir();
  gw = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_STORE_PROBE_INTERVAL_MILLISECONDS: String(PROBE_MS),
      // Nothing served from memory: every read goes to the store.
      ARKVORY_BLOB_CACHE_BYTES: '0',
      ARKVORY_OPEN_FILE_CACHE_ENTRIES: '0',
    },
    dataDir,
  });
  const put = await request(`${gw.url}/api/v1/repositories/sh/artifacts/f.bin`, {
    method: 'PUT',
    headers: bearer(key),
    body: file,
  });
  expect(put.status).toBe(201);
}, 60_000);

describe('store health of a directory store', () => {
  it('reports ok, then unreachable within the bound when storage-id is gone; store calls answer 503 store_unreachable; back after 2 passing probes', async () => {
    expect(await status()).toMatchObject({
      code: 200,
      body: { status: 'serving', store: { state: 'ok', lastError: null } },
    });
    const id = path.join(dataDir, 'storage-id');
    await rename(id, `${id}.away`);
    const lostAt = Date.now();
    await waitForState('unreachable', 10_000);
    const down = await status();
    // Measured to when the gateway made the store unreachable (`since`, its clock, the same wall
    // clock as ours), not to when this client's polling saw it: on a loaded machine a poll's round
    // trip alone took hundreds of milliseconds. From just after the rename, so never less than it took.
    // Bound: 2 periods + one probe timeout (0.9 period); one more period of slack for the machine.
    expect(Date.parse(down.body.store.since) - lostAt).toBeLessThanOrEqual(3.9 * PROBE_MS + PROBE_MS);
    expect(down.code).toBe(200);
    expect(down.body.store.lastError?.code).toBe('storage_mismatch');
    expect(Date.parse(down.body.store.lastError!.at)).toBeGreaterThanOrEqual(lostAt - 1000);
    const ready = await request(`${gw.url}/health/ready`, { headers: bearer(key) });
    expect(JSON.parse(ready.body.toString()).store.state).toBe('unreachable');

    const started = performance.now();
    const read = await request(contentUrl(), { headers: bearer(key) });
    expect(read.status).toBe(503);
    expect(JSON.parse(read.body.toString()).code).toBe('store_unreachable');
    expect(read.headers['retry-after']).toBe('2');
    const upload = await request(`${gw.url}/api/v1/repositories/sh/artifacts/g.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body: Buffer.from('new bytes'),
    });
    expect(upload.status).toBe(503);
    expect(JSON.parse(upload.body.toString()).code).toBe('store_unreachable');
    expect(performance.now() - started).toBeLessThan(2000);
    const metrics = (await request(`${gw.url}/metrics`)).body.toString();
    expect(metrics).toContain('arkvory_store_state{state="unreachable"} 1');
    const probeFailures = /arkvory_store_failures_total\{source="probe"\} (\d+)/.exec(metrics)?.[1];
    expect(Number(probeFailures)).toBeGreaterThanOrEqual(2);

    await rename(`${id}.away`, id);
    const backAt = Date.now();
    // Degraded, or already ok when a slow poll missed the degraded spell (2 quiet periods).
    await waitForState((state) => state !== 'unreachable', 10_000);
    // Two passing probes in a row: at most 2 periods + one probe after the file is back, plus slack;
    // measured to the gateway's line of the change (unreachable to degraded), as the loss above.
    expect((await loggedAt('store reachable again')) - backAt).toBeLessThanOrEqual(3 * PROBE_MS + PROBE_MS);
    const again = await request(contentUrl(), { headers: bearer(key) });
    expect(again.status).toBe(200);
    expect(sha256(again.body)).toBe(sha256(file));
    await waitForState('ok', 5000);
  });
});
