/**
 * Bytes in of HTTP/1.1 requests at a real gateway: the request head is counted (docs/metrics.md
 * "headers included", docs/observability.md "wire bytes read for the request"), in the request
 * line's `bytesIn`, `arkvory_http_bytes_total{direction="in"}` and the principal's `bytes_up`. Node
 * has read a head by the time its request starts, so counting from then left every head out: a
 * client sending 16 KiB heads all day moved no bytes in.
 */
import net from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const db = useTestDatabase();
const PADDING = 'p'.repeat(6000);
let gw: GatewayProcess;
let reader: { key: string; principalId: string };

beforeAll(async () => {
  await createRepository(db.pool, 'hb');
  reader = await createServiceAccount(db.pool, { grants: { hb: 'read' } });
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_USAGE_STATS_FLUSH_SECONDS: '1' } });
}, 90_000);

afterAll(async () => {
  await gw?.stop('SIGTERM');
});

/** The head of a GET sent with `x-request-id: id`, the padding and the reader's key. */
function head(id: string): string {
  const headers = { host: '127.0.0.1', 'x-request-id': id, 'x-padding': PADDING, ...bearer(reader.key) };
  return `GET /api/v1/repositories HTTP/1.1\r\n${Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}\r\n`;
}

/** Sends each head on one keep-alive connection, the next once the answer before it ended. */
async function sendInTurn(heads: readonly string[]): Promise<void> {
  const socket = net.connect(gw.port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let text = '';
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  for (const [i, h] of heads.entries()) {
    socket.write(h);
    await waitUntil(() => /^HTTP\/1\.1 [\s\S]*\r\n\r\n[\s\S]*\}$/.test(text), {
      what: `the answer to request ${i + 1}`,
    });
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
    text = '';
  }
  socket.destroy();
}

async function bytesIn(): Promise<number> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  return Number(/^arkvory_http_bytes_total\{direction="in"\} (\d+)$/m.exec(text)?.[1]);
}

it('counts each request head in bytes in: the request line, the metric and the usage statistics', async () => {
  const before = await bytesIn();
  const heads = [head('head-1'), head('head-2')];
  await sendInTurn(heads);
  for (const [i, h] of heads.entries()) {
    let line: Record<string, unknown> | undefined;
    await waitUntil(
      () => (line = gw.logLines().find((l) => l.msg === 'request' && l.clientReqId === `head-${i + 1}`)) !== undefined,
      { what: `the request line of head-${i + 1}` },
    );
    expect(line).toMatchObject({ status: 200, bytesIn: Buffer.byteLength(h) });
  }
  // The scrape before counted only its own head; this one is counted when it closes, after its render.
  expect((await bytesIn()) - before).toBeGreaterThanOrEqual(Buffer.byteLength(heads.join('')));
  let up = 0;
  await waitUntil(
    async () => {
      const { rows } = await db.pool.query<{ bytes_up: string }>(
        'SELECT bytes_up::bigint FROM arkvory_usage_principal_days WHERE principal_id = $1',
        [reader.principalId],
      );
      up = Number(rows[0]?.bytes_up ?? 0);
      return rows.length > 0;
    },
    { what: 'the usage flush', timeoutMs: 20_000 },
  );
  expect(up).toBe(Buffer.byteLength(heads.join('')));
}, 60_000);
