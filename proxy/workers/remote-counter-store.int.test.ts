/**
 * A worker's rate-limit checks when its coordinating process does not answer (ARKVORY_WORKERS=2, no
 * Redis: the counters are the coordinating process's), through a real gateway process: the
 * coordinating process is stopped (SIGSTOP), and a worker still answers each request after the store
 * timeout, allowed where the rules fail open and 503 `rate_limit_unavailable` where a rule says
 * `on_store_error: deny`, as with a hung Redis (docs/rate-limits.md, "Failure behaviour").
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { connectionsOnBothWorkers, waitForWorkers } from '../../test/support/worker-instance.ts';

/** Far above the store timeout (300 ms, two checks a request) and the database's answers. */
const ANSWER_BOUND_MS = 10_000;

describe('rate-limit counters of a worker whose coordinating process is stopped', () => {
  const db = useTestDatabase();
  const clients: Client[] = [];
  afterAll(async () => {
    for (const client of clients) await client.destroy();
  });

  it('each worker answers after the store timeout: fail open, or 503 rate_limit_unavailable for on_store_error: deny', async () => {
    await createRepository(db.pool, 'rc');
    await createRepository(db.pool, 'closed');
    const { key } = await createServiceAccount(db.pool, { grants: { rc: 'read', closed: 'read' } });
    const rules = path.join(await makeTempDir('arkvory-remote-counters-'), 'rules.yaml');
    await writeFile(
      rules,
      `rate_limits:
  gateway_request:
    - name: closed_when_unknown
      action: limit
      characteristics: [principal]
      limit: 1000000
      period_s: 60
      on_store_error: deny
      match:
        repository: closed
`,
    );
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: '2',
        ARKVORY_RATE_LIMITS_FILE: rules,
        ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: '300',
      },
      timeoutMs: 60_000,
    });
    await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    const pinned = await connectionsOnBothWorkers(gw.url, clients, 1);
    const send = async (client: Client, url: string) => {
      const answer = client.request({ method: 'GET', path: url, headers: bearer(key) }).then(async (res) => {
        const body = await res.body.text();
        return {
          status: res.statusCode,
          code: res.statusCode >= 400 ? (JSON.parse(body) as { code: string }).code : '',
        };
      });
      return Promise.race([answer, sleep(ANSWER_BOUND_MS).then(() => ({ status: 0, code: 'no answer' }))]);
    };
    for (const { client } of pinned) {
      expect(await send(client, '/api/v1/repositories')).toEqual({ status: 200, code: '' });
      expect((await send(client, '/api/v1/repositories/closed/artifacts/x')).code).toBe('not_found');
    }

    const primary = gw.child.pid!;
    process.kill(primary, 'SIGSTOP');
    try {
      for (const { client } of pinned) {
        expect(await send(client, '/api/v1/repositories')).toEqual({ status: 200, code: '' });
        expect(await send(client, '/api/v1/repositories/closed/artifacts/x')).toEqual({
          status: 503,
          code: 'rate_limit_unavailable',
        });
      }
    } finally {
      process.kill(primary, 'SIGCONT');
    }
    expect(gw.logs()).toContain('rate-limit store failed');
    for (const { client } of pinned)
      expect((await send(client, '/api/v1/repositories/closed/artifacts/x')).code).toBe('not_found');
    await gw.stop();
  });
});
