/**
 * How an instance of two workers (ARKVORY_WORKERS=2, docs/architecture.md "Workers") keeps its
 * workers: a SIGHUP while the workers start kills none of them, and the worker that was starting
 * reloads its secrets once it serves.
 */
import { describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { waitForWorkers } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
describe('a worker of an instance', () => {
  it('survives a SIGHUP while the workers start, and the starting one reloads once it serves', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' },
      waitFor: 'none',
    });
    await waitUntil(() => gw.logLines().some((l) => l.msg === 'starting the workers of this instance'), {
      what: 'the instance to start its workers',
      timeoutMs: 60_000,
      intervalMs: 10,
    });
    gw.child.kill('SIGHUP');
    // Both workers listen, or the instance ended (what the default action of SIGHUP in a starting
    // worker did: the start failed and took the instance with it).
    const listening = () => gw.logLines().filter((l) => l.msg === 'listening').length;
    await waitUntil(() => listening() === 2 || gw.child.exitCode !== null, {
      what: 'both workers to listen',
      timeoutMs: 60_000,
    });
    expect(gw.child.exitCode).toBeNull();
    const status = await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
    expect(status.workers.map((w) => w.restarts)).toEqual([0, 0]);
    // The first worker was starting when the signal came: it reads its secrets again once it serves.
    await waitUntil(() => gw.logLines().some((l) => l.worker === 0 && l.signal === 'SIGHUP'), {
      what: 'the first worker to take the SIGHUP',
      timeoutMs: 30_000,
    });
    expect(gw.logLines().filter((l) => /failed to start|died/.test(String(l.msg)))).toEqual([]);
    expect(await gw.stop()).toBe(0);
  });
});
