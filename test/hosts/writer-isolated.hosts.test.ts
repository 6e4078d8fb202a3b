/**
 * Scenario 6 (issue 24): the writer host is cut from everything (its switch port down). Expected:
 * once the router has seen the writer fail, mutating requests through it get a clear 503
 * `unavailable` with Retry-After (never a hang, never a write through a reader); reads keep flowing
 * from the readers, byte-exact; the writer fences itself (it cannot renew its lease). After healing,
 * the fenced writer is replaced on its host, and nothing was lost: the file uploaded before is
 * exact, the refused upload simply succeeds when retried, and the catalog holds exactly these two.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { curlOnClient, MiB, readDownload, routerHealthy, routerLineFor, sha256, startDeployment, waitUntil, type Deployment } from './deployment.ts';
import { setLink } from './netns.ts';

const PROBE_MS = 1000;

let d: Deployment;

beforeAll(async () => {
  d = await startDeployment({ policy: { slots: 4, rateBytesPerSec: 4 * 16 * MiB }, fileBytes: MiB + 777, probeIntervalMs: PROBE_MS });
}, 150_000);

afterAll(async () => {
  await d?.stop();
});

describe('the writer host partitioned from everything', () => {
  it('answers writes through the router with 503 unavailable, keeps reads on the readers, and loses nothing', async () => {
    const { topology } = d;
    const second = randomBytes(300_000);
    const secondFile = path.join(d.downloads, 'second.upload');
    writeFileSync(secondFile, second);
    const secondUrl = `${d.routerUrl}/api/v1/repositories/shared/artifacts/second.bin`;
    const answer = path.join(d.downloads, 'answer');
    const upload = async () => {
      const res = await topology.run('client', 'curl', ['-sS', '-o', answer, '-w', '%{http_code} %header{retry-after}', '-H', `Authorization: Bearer ${d.writeKey}`, '-H', 'content-type: application/octet-stream', '-T', secondFile, secondUrl]);
      return { status: res.stdout, body: readFileSync(answer, 'utf8'), stderr: res.stderr };
    };

    setLink(topology.hosts.writer, false);
    try {
      await waitUntil('the router to mark the writer unavailable', async () => (await routerHealthy(d.routerUrl)).writer === false, 2 * PROBE_MS + 5000, 50);
      const refused = await upload();
      expect(refused.status, refused.stderr).toBe('503 2');
      expect(JSON.parse(refused.body)).toMatchObject({ code: 'unavailable' });

      for (let i = 0; i < 4; i++) {
        const id = `s6-read-${i}`;
        const res = await curlOnClient(d, ['--fail', '-H', `X-Request-Id: ${id}`, '-o', path.join(d.downloads, id), `${d.routerUrl}${d.contentPath}`]);
        expect(res.code, res.stderr).toBe(0);
        expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
        expect([d.readers[0].url, d.readers[1].url]).toContain((await routerLineFor(d, id)).backend);
      }
      // Cut from PostgreSQL, the writer fences itself within its 8 s permit.
      await waitUntil('the writer to fence', () => d.writer.logLines().some((l) => String(l.msg).startsWith('fenced:')), 15_000, 100);
    } finally {
      setLink(topology.hosts.writer, true);
    }

    // Healed, the fenced writer stays 503 until it is restarted; its replacement waits out the reservation.
    expect((await fetch(`${d.writer.url}/health/status`)).status).toBe(503);
    await d.writer.stop(5000);
    const writer = await topology.startGateway('writer', { role: 'api', slot: 0 });
    await waitUntil('the router to see the new writer', async () => (await routerHealthy(d.routerUrl)).writer === true, 20_000);

    const old = await curlOnClient(d, ['--fail', '-o', path.join(d.downloads, 'after'), `${d.routerUrl}${d.contentPath}`]);
    expect(old.code, old.stderr).toBe(0);
    expect(sha256(readDownload(d, 'after'))).toBe(sha256(d.file));
    const retried = await upload();
    expect(retried.status, retried.body).toMatch(/^201 /);
    const back = await curlOnClient(d, ['--fail', '-o', path.join(d.downloads, 'second.back'), `${secondUrl}/content`]);
    expect(back.code, back.stderr).toBe(0);
    expect(sha256(readDownload(d, 'second.back'))).toBe(sha256(second));
    const { rows } = await topology.pool.query<{ name: string }>(`SELECT name FROM arkvory_artifacts WHERE repository = 'shared' ORDER BY 1`);
    expect(rows.map((r) => r.name)).toEqual(['big.bin', 'second.bin']);
    expect(writer.isRunning()).toBe(true);
  }, 150_000);
});
