/**
 * Fault: PostgreSQL is unreachable (the proxy in front of it disabled: connections refused) when the gateway starts.
 * Expected: the process retries with backoff and logs each attempt; it starts serving once the link is enabled, or,
 * with ARKVORY_DATABASE_STARTUP_WAIT_SECONDS elapsed, exits 1 naming the database and the variable.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../test/support/database.ts';
import { startGateway } from '../test/support/gateway.ts';
import { logLine, logTimeMs } from './support/gateways.ts';
import { waitForHealth } from '../test/harness/index.ts';
import { setEnabled, waitParked } from './support/shared-cluster.ts';
import { startToxiproxy, type ToxiproxyServer } from './support/toxiproxy.ts';

let toxiproxy: ToxiproxyServer;
let db: TestDatabase & { drop(): Promise<void> };

beforeAll(async () => {
  toxiproxy = await startToxiproxy();
  db = await createTestDatabase();
});

afterAll(async () => {
  await toxiproxy?.stop();
  await db?.drop();
});

function retryLines(lines: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return lines.filter((l) => l.msg === 'PostgreSQL not reachable at startup; retrying');
}

describe('PostgreSQL unreachable when the gateway starts', () => {
  it('retries with backoff, says so, and starts serving when the database appears', async () => {
    const link = await toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
    await setEnabled(link, false);
    const gateway = await startGateway({ env: { ARKVORY_DATABASE_URL: link.through(db.url) }, waitFor: 'none' });
    await waitParked(gateway);
    // Let it retry a few times (0.25 s, 0.5 s, 1 s...) before the database appears.
    await new Promise<void>((resolve, reject) => {
      const timer = setInterval(() => {
        if (retryLines(gateway.logLines()).length >= 3) resolve(clearInterval(timer));
        if (gateway.child.exitCode !== null) reject(new Error(`exited: ${gateway.logs()}`));
      }, 50);
    });
    const enabledAtMs = Date.now();
    await setEnabled(link, true);
    await waitForHealth(gateway, { timeoutMs: 30_000 });

    const retries = retryLines(gateway.logLines());
    expect(retries[0]).toMatchObject({
      level: 'warn',
      attempt: 1,
      retryInMs: 250,
      code: 'ECONNREFUSED',
      target: `${link.host}:${link.port}`,
    });
    expect(retries.slice(0, 3).map((l) => l.retryInMs)).toEqual([250, 500, 1000]);
    // Backoff, not a busy loop: each attempt waited at least its delay after the previous one.
    for (let i = 1; i < retries.length; i++)
      expect(logTimeMs(retries[i]) - logTimeMs(retries[i - 1])).toBeGreaterThanOrEqual(
        Number(retries[i - 1]!.retryInMs) - 5,
      );
    const reachable = logLine(gateway, 'PostgreSQL reachable; starting');
    expect(reachable?.attempts).toBe(retries.length + 1);
    // Within one retry delay (at most 5 s, here ≤ 2 s) of the database appearing, plus slack.
    expect(logTimeMs(reachable)).toBeLessThanOrEqual(enabledAtMs + Number(retries.at(-1)!.retryInMs) + 1500);
    expect(gateway.logs()).not.toContain(db.url);
    expect(await gateway.stop('SIGTERM')).toBe(0);
    await link.proxy.remove();
  }, 90_000);

  it('exits 1 after ARKVORY_DATABASE_STARTUP_WAIT_SECONDS when the database never appears', async () => {
    const link = await toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
    await setEnabled(link, false);
    const gateway = await startGateway({
      env: { ARKVORY_DATABASE_URL: link.through(db.url), ARKVORY_DATABASE_STARTUP_WAIT_SECONDS: '2' },
      waitFor: 'none',
    });
    expect(await gateway.exited).toBe(1);
    const retries = retryLines(gateway.logLines());
    const fatal = logLine(gateway, 'cannot start: PostgreSQL at');
    expect(fatal?.msg).toContain('ARKVORY_DATABASE_STARTUP_WAIT_SECONDS=2');
    // 0.25 + 0.5 + 1 s, then what is left of the 2 s (the attempts take time too); the next attempt is fatal.
    expect(retries.slice(0, 3).map((l) => l.retryInMs)).toEqual([250, 500, 1000]);
    expect(retries.length).toBeLessThanOrEqual(4);
    if (retries[3]) expect(Number(retries[3].retryInMs)).toBeLessThanOrEqual(250);
    const waitedMs = logTimeMs(fatal) - logTimeMs(retries[0]);
    expect(waitedMs).toBeGreaterThanOrEqual(2000 - 300);
    expect(waitedMs).toBeLessThan(2000 + 3000);
    expect(gateway.logs()).toContain('arkvory: cannot start: PostgreSQL at');
    await link.proxy.remove();
  }, 90_000);
});
