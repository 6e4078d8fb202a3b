/**
 * /metrics of an instance of two worker processes (ARKVORY_WORKERS=2) over real sockets: a flood
 * of anonymous scrapes leaves the coordinating process answering the workers' rate-limit calls in
 * time (no limit fails open).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request as undiciRequest } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import { readsByPrincipal, writeRateLimitsFile } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitForWorkers } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
let reader: string;

beforeAll(async () => {
  await createRepository(db.pool, 'wm');
  ({ key: reader } = await createServiceAccount(db.pool, { grants: { wm: 'read' }, scopes: ['read'] }));
});

describe('/metrics of an instance of workers', () => {
  it('a flood of anonymous scrapes: the rate limit of a principal still holds, none fails open', async () => {
    const limit = 10;
    const file = await writeRateLimitsFile({ gateway_request: [readsByPrincipal('reads_by_principal', limit, 3600)] });
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2', ARKVORY_RATE_LIMITS_FILE: file },
    });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const agent = new Agent({ connections: 48 });
    let flooding = true;
    let scrapes = 0;
    const flood = Array.from({ length: 48 }, async () => {
      while (flooding) {
        try {
          const res = await undiciRequest(`${gw.url}/metrics`, { dispatcher: agent });
          await res.body.dump();
          scrapes++;
        } catch {
          // A scrape cut at the end of the test: only the reads' answers are checked.
        }
      }
    });
    try {
      await sleep(1000);
      const statuses: number[] = [];
      for (let i = 0; i < 40; i++) {
        const res = await request(`${gw.url}/api/v1/repositories/wm/artifacts/none.bin`, { headers: bearer(reader) });
        statuses.push(res.status);
      }
      const failedOpen = gw.logLines().filter((l) => /rate-limit store failed/.test(String(l.msg)));
      console.log(`[measured] ${scrapes} scrapes during 40 limited reads`);
      expect(failedOpen).toEqual([]);
      expect(statuses.filter((s) => s === 404)).toHaveLength(limit);
      expect(statuses.filter((s) => s === 429)).toHaveLength(40 - limit);
    } finally {
      flooding = false;
      await Promise.all(flood);
      await agent.close();
      await gw.stop();
    }
  });
});
