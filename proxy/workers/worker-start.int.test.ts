/**
 * A worker that starts while its coordinating process does not answer (ARKVORY_WORKERS=2), through a
 * real gateway process: the coordinating process is stopped (SIGSTOP) once it has forked a worker,
 * and that worker fails its start with `coordinator_unanswered` within the start deadline instead of
 * waiting forever. At the instance's start the instance then stops with exit code 1; a replacement
 * that failed so is started once more when the coordinating process runs again, and the instance
 * serves on both workers (docs/architecture.md, "Workers").
 */
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { waitForWorkers, workerPid } from '../../test/support/worker-instance.ts';
import { START_CALL_DEADLINE_MS, START_PING_INTERVAL_MS } from './start-calls.ts';

/**
 * Far above the longest a starting worker waits for a stopped coordinating process (a ping interval
 * and the deadline) plus the rest of its start on a loaded machine, far below forever.
 */
const FAILED_START_BOUND_MS = START_PING_INTERVAL_MS + START_CALL_DEADLINE_MS + 25_000;

const db = useTestDatabase();
let stopped: GatewayProcess | undefined;

afterEach(() => {
  // Never leave a coordinating process stopped, whatever failed.
  stopped?.signal('SIGCONT');
  stopped = undefined;
});

async function children(gw: GatewayProcess): Promise<number[]> {
  const text = await readFile(`/proc/${gw.child.pid}/task/${gw.child.pid}/children`, 'utf8').catch(() => '');
  return text.split(' ').filter(Boolean).map(Number);
}

function unanswered(gw: GatewayProcess) {
  return gw.logLines().filter((l) => l.code === 'coordinator_unanswered');
}

describe('a worker starting while its coordinating process is stopped', () => {
  it('fails its start with coordinator_unanswered within the deadline; the instance’s start fails with exit code 1', async () => {
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' },
      waitFor: 'none',
    });
    await waitUntil(async () => (await children(gw)).length > 0, {
      what: 'the first worker to be forked',
      timeoutMs: 60_000,
      intervalMs: 10,
      process: gw,
    });
    // Whatever call the worker is at (hello, the lease, the wait for the other worker), none is answered.
    gw.signal('SIGSTOP');
    stopped = gw;
    await waitUntil(() => unanswered(gw).length > 0, {
      what: 'a worker to fail its start with coordinator_unanswered',
      timeoutMs: FAILED_START_BOUND_MS,
      intervalMs: 100,
    });
    expect(unanswered(gw)[0]).toMatchObject({ level: 'fatal', msg: expect.stringMatching(/coordinating process/) });
    // Its stderr line comes down another pipe than its log line: read once it has arrived.
    await waitUntil(
      () => /arkvory: cannot start: the coordinating process of this instance did not answer/.test(gw.stderr()),
      {
        what: "the worker's one stderr line",
        timeoutMs: 5_000,
        intervalMs: 50,
      },
    );

    gw.signal('SIGCONT');
    stopped = undefined;
    const code = await Promise.race([gw.exited, new Promise((r) => setTimeout(() => r('still running'), 30_000))]);
    expect(code).toBe(1);
    expect(gw.logLines().some((l) => l.msg === 'a worker failed to start; stopping the instance')).toBe(true);
  });

  it('a replacement fails its start so, is started once more when the coordinating process runs, and the instance serves on both workers', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
    try {
      await waitForWorkers(gw, (s) => s.workers.filter((w) => w.state === 'serving').length === 2);
      const before = await children(gw);
      process.kill(await workerPid(gw, 1), 'SIGKILL');
      // Its replacement forked: a child the instance did not have.
      await waitUntil(async () => (await children(gw)).some((pid) => !before.includes(pid)), {
        what: 'the replacement to be forked',
        timeoutMs: 30_000,
        intervalMs: 10,
        process: gw,
      });
      gw.signal('SIGSTOP');
      stopped = gw;
      await waitUntil(() => unanswered(gw).length > 0, {
        what: 'the replacement to fail its start with coordinator_unanswered',
        timeoutMs: FAILED_START_BOUND_MS,
        intervalMs: 100,
      });
      gw.signal('SIGCONT');
      stopped = undefined;

      const status = await waitForWorkers(
        gw,
        (s) => s.workers.filter((w) => w.state === 'serving').length === 2 && s.workers[1]!.restarts >= 2,
      );
      // The killed worker and the replacement that failed its start: two restarts, no more.
      expect(status.workers[1]!.restarts).toBe(2);
      expect(unanswered(gw)).toHaveLength(1);
      expect(gw.isRunning()).toBe(true);
    } finally {
      gw.signal('SIGCONT');
      await gw.stop();
    }
  });
});
