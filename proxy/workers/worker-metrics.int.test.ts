/**
 * /metrics of an instance of two worker processes (ARKVORY_WORKERS=2) over real sockets: a flood
 * of anonymous scrapes leaves the coordinating process answering the workers' rate-limit calls in
 * time (no limit fails open), and a stopped worker leaves the scrape without its families, counted,
 * instead of hanging every scrape; the instance's counters do not go back when a worker is left out
 * of a sum or dies.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, type Client, request as undiciRequest } from 'undici';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readsByPrincipal, writeRateLimitsFile } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { connectionsOnBothWorkers, waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
const clients: Client[] = [];
let reader: string;

beforeAll(async () => {
  await createRepository(db.pool, 'wm');
  ({ key: reader } = await createServiceAccount(db.pool, { grants: { wm: 'read' }, scopes: ['read'] }));
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

function sample(text: string, name: string): number | undefined {
  const line = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return line ? Number(line[1]) : undefined;
}

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

  it('a stopped worker: the scrape answers without its families and counts it unanswered', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const [onZero] = await connectionsOnBothWorkers(gw.url, clients, 1);
    const scrape = async () => {
      const res = await onZero!.client.request({ path: '/metrics', method: 'GET' });
      expect(res.statusCode).toBe(200);
      return res.body.text();
    };
    expect(sample(await scrape(), 'arkvory_workers_unanswered')).toBe(0);
    const victim = await workerPid(gw, 1);
    process.kill(victim, 'SIGSTOP');
    try {
      // The coordinating process waits 2 s for the stopped worker; far less than this bound.
      const text = await Promise.race([scrape(), sleep(15_000).then(() => 'no answer within 15 s')]);
      expect(text).not.toBe('no answer within 15 s');
      expect(sample(text, 'arkvory_workers_unanswered')).toBe(1);
      // Worker 0's families (the store state is a worker's) are in it still.
      expect(sample(text, 'arkvory_store_state\\{state="ok"\\}')).toBe(1);
    } finally {
      process.kill(victim, 'SIGCONT');
    }
    expect(sample(await scrape(), 'arkvory_workers_unanswered')).toBe(0);
    await gw.stop();
  });

  it('the instance counts requests without going back when a worker is left out of a sum or dies', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const [onZero, onOne] = await connectionsOnBothWorkers(gw.url, clients, 1);
    for (let i = 0; i < 20; i++) {
      const res = await onOne!.client.request({
        path: '/api/v1/repositories/wm/artifacts/none.bin',
        method: 'GET',
        headers: bearer(reader),
      });
      await res.body.dump();
    }
    const requests = async () => {
      const res = await onZero!.client.request({ path: '/metrics', method: 'GET' });
      expect(res.statusCode).toBe(200);
      const text = await res.body.text();
      let total = 0;
      // The 404s alone: only worker 1 answered any, while the checks below add 200s on both.
      for (const m of text.matchAll(/^arkvory_http_requests_total\{[^}]*status="404"[^}]*\} (\S+)$/gm))
        total += Number(m[1]);
      return total;
    };
    const before = await requests();
    expect(before).toBe(20);
    const victim = await workerPid(gw, 1);
    process.kill(victim, 'SIGSTOP');
    let stopped: number;
    try {
      stopped = await requests();
    } finally {
      process.kill(victim, 'SIGCONT');
    }
    expect(stopped).toBe(20);
    process.kill(victim, 'SIGKILL');
    await waitForWorkers(gw, (s) =>
      s.workers.every((w) => w.state === 'serving' && w.restarts === (w.index === 1 ? 1 : 0)),
    );
    expect(await requests()).toBe(20);
    await gw.stop();
  });
});
