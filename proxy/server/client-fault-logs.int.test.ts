/**
 * Repeated client faults at a real gateway (issue 35, item 3 on the gateway's side): malformed
 * heads, Authorization bytes no key can hold, a second Authorization header, bad and missing keys,
 * a link's parameters on another method, and the ban they end in. At the default level the
 * gateway's log grows by a bounded number of lines however many arrive; every one is still answered
 * and counted in the request metrics.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { CLIENT_FAULT_LOG } from '../../lib/log-budget.ts';

const db = useTestDatabase();
let gw: GatewayProcess;

beforeAll(async () => {
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
}, 90_000);
afterAll(async () => {
  await gw?.stop('SIGTERM');
});

/** Sends `head` as bytes on a fresh connection; resolves with the status. */
function rawExchange(port: number, head: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.end(Buffer.from(head, 'latin1')));
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('error', reject);
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0)));
  });
}

/** A request with a known id (logged as the client's, `clientReqId`); resolves once the gateway's log holds a line of it. */
async function markLog(reqId: string): Promise<void> {
  await (await fetch(`${gw.url}/health/live`, { headers: { 'x-request-id': reqId } })).arrayBuffer();
  const deadline = Date.now() + 10_000;
  while (!gw.logLines().some((l) => l.clientReqId === reqId)) {
    if (Date.now() > deadline) throw new Error(`no log line for ${reqId}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const target = '/api/v1/repositories/r/artifacts/a/content';
const HEADS: Record<string, (i: number) => string> = {
  malformed_head: () => `GET ${target} HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n`,
  bad_authorization_bytes: () => `GET ${target} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ark_\xff\xfe\x80\r\n\r\n`,
  bad_basic: () => `GET ${target} HTTP/1.1\r\nHost: a\r\nAuthorization: Basic !!!notbase64\r\n\r\n`,
  duplicate_authorization: () =>
    `GET ${target} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n`,
  unknown_key: (i) =>
    `GET ${target} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ark_${String(i).padStart(12, '0')}_${'x'.repeat(43)}\r\n\r\n`,
  no_key: () => `GET ${target} HTTP/1.1\r\nHost: a\r\n\r\n`,
  link_on_put: () =>
    `PUT ${target}?X-Arkvory-Expires=1&X-Arkvory-Signature=00 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n`,
  bad_target: () => `GET http://[::1 HTTP/1.1\r\nHost: a\r\n\r\n`,
};

describe('gateway: repeated client faults', () => {
  it('2,000 bad requests of every kind: all refused, the log grows by a bounded number of lines', async () => {
    const N = 2000;
    const kinds = Object.keys(HEADS);
    await markLog('before-flood');
    const linesBefore = gw.logLines().length;
    const bytesBefore = gw.logs().length;
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < N) {
        const i = next++;
        const status = await rawExchange(gw.port, HEADS[kinds[i % kinds.length]!]!(i));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    // Answered, every one: 400 for what cannot be a request or a credential, 401 for a bad or
    // missing key, 429 once the address is banned for its failures.
    expect([...statuses.keys()].sort()).toEqual([400, 401, 429]);
    expect([...statuses.values()].reduce((a, b) => a + b)).toBe(N);
    await markLog('after-flood');
    const lines = gw
      .logLines()
      .slice(linesBefore)
      .filter((l) => l.clientReqId !== 'after-flood');
    // Per code, the fault's line and its request line within the budget; one line for the ban itself.
    const codes = new Set(lines.map((l) => l.code).filter((c) => c !== undefined));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThanOrEqual(codes.size * 2 * CLIENT_FAULT_LOG.linesPerInterval + 1);
    expect(lines.length).toBeLessThan(60);
    const bans = lines.filter((l) => l.msg === 'address banned after failed authentications');
    expect(bans).toHaveLength(1); // the operator's news, at warn, once per ban
    for (const line of lines.filter((l) => !bans.includes(l))) {
      expect(line.level).toBe('info'); // a client's fault, not ours
      expect(line.err).toBeUndefined();
    }
    expect(gw.logs().length - bytesBefore).toBeLessThan(60 * 600);
    // Counted, every one, by code.
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    const faults = [...metrics.matchAll(/^arkvory_http_client_faults_total\{code="([a-z_0-9]+)"\} (\d+)$/gm)];
    const counted = Object.fromEntries(faults.map((m) => [m[1]!, Number(m[2])]));
    // The parser's refusals (malformed heads) never become requests: answered 400 by the client-error
    // handler, logged at debug, counted by their code as the unparsable target's 400 is.
    const perKind = N / kinds.length;
    expect(counted).toMatchObject({ duplicate_authorization: perKind, invalid_request: 2 * perKind });
    expect((counted.unauthorized ?? 0) + (counted.rate_limited ?? 0)).toBe(statuses.get(401)! + statuses.get(429)!);
    expect(counted.rate_limited).toBeGreaterThan(0); // the flood got its address banned
  }, 120_000);
});
