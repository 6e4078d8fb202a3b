/**
 * Faults around the writer, on one deployment (issue 24, scenarios 5 then 6).
 *
 * 5. 300 ms delay each way on the writer ↔ db link while the client uploads through the router (the
 *    issue asks for `tc netem`; this kernel has no sch_netem, so a real toxiproxy on the db host
 *    delays the writer's PostgreSQL traffic, see database-link.ts). Every upload succeeds or fails
 *    cleanly; nothing is half-published (no file left in tmp/, every blob on the store holds exactly
 *    the bytes its name says, every catalog row has its blob); nothing is published twice (same bytes
 *    twice → 201 and 200, different bytes under one name → 201 and 409, one row per name, committed
 *    uploads = 201 and 200 answers); the writer keeps its lease.
 * 6. The writer host cut from everything (its switch port down): once the router has seen the writer
 *    fail, mutating requests through it get a clear 503 `unavailable` with Retry-After (never a hang,
 *    never a write through a reader); reads keep flowing from the readers, byte-exact; the writer
 *    fences itself. After healing, the fenced writer is replaced on its host, and nothing was lost:
 *    every file uploaded before is exact and the refused upload succeeds when retried.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { startDatabaseLink, type DatabaseLink } from './database-link.ts';
import { curlOnClient, fetchOnClient, MiB, readDownload, routerHealthy, routerLineFor, sha256 } from './deployment.ts';
import { useDeployment } from './use-deployment.ts';
import { waitUntil, withLeaseLines } from '../harness/index.ts';
import { setLink } from './netns.ts';

const DELAY_MS = 300;
const PROBE_MS = 1000;

let link: DatabaseLink;

const d = useDeployment({
  policy: { slots: 4, rateBytesPerSec: 4 * 16 * MiB },
  fileBytes: MiB + 777,
  probeIntervalMs: PROBE_MS,
  beforeWriter: async (topology) => {
    link = await startDatabaseLink(topology);
    return { ARKVORY_DATABASE_URL: link.databaseUrl };
  },
});

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    let entries: string[];
    try {
      entries = readdirSync(p);
    } catch {
      return;
    }
    for (const e of entries) {
      const full = path.join(p, e);
      if (statSync(full).isDirectory()) walk(full);
      else out.push(full);
    }
  };
  walk(dir);
  return out;
}

describe('scenario 5: a slow writer ↔ database link during uploads', () => {
  it('publishes each upload once or refuses it cleanly, never half', async () => {
    const bodies = new Map<string, Buffer>();
    const upload = (name: string, bytes: Buffer, tag: string) => {
      const file = path.join(d.downloads, `${tag}.upload`);
      writeFileSync(file, bytes);
      return d.topology.run(
        'client',
        'curl',
        [
          '-sS',
          '-o',
          path.join(d.downloads, `${tag}.answer`),
          '-w',
          '%{http_code} %{time_total}',
          '-H',
          `Authorization: Bearer ${d.writeKey}`,
          '-H',
          'content-type: application/octet-stream',
          '-T',
          file,
          `${d.routerUrl}/api/v1/repositories/shared/artifacts/${name}`,
        ],
        120_000,
      );
    };
    const distinct = Array.from({ length: 4 }, (_, i) => [`slow-${i}.bin`, randomBytes(MiB + i)] as const);
    const same = randomBytes(300_000);
    const clashA = randomBytes(200_000);
    const clashB = randomBytes(200_001);
    for (const [name, bytes] of distinct) bodies.set(name, bytes);

    await link.delay(DELAY_MS);
    const runs = await Promise.all([
      ...distinct.map(([name, bytes], i) => upload(name, bytes, `d${i}`)),
      upload('same.bin', same, 'same1'),
      upload('same.bin', same, 'same2'),
      upload('clash.bin', clashA, 'clashA'),
      upload('clash.bin', clashB, 'clashB'),
    ]);
    const answers = runs.map((r) => {
      const [status, seconds] = r.stdout.split(' ');
      return { status: Number(status), seconds: Number(seconds), stderr: r.stderr };
    });
    const answerBody = (tag: string) => readFileSync(path.join(d.downloads, `${tag}.answer`), 'utf8');

    // Every request felt the link (each upload makes several database round trips of ≥ 2 × delay).
    for (const a of answers) expect(a.seconds, a.stderr).toBeGreaterThan((2 * DELAY_MS) / 1000);
    expect(answers.slice(0, 4).map((a) => a.status)).toEqual([201, 201, 201, 201]);
    expect(
      answers
        .slice(4, 6)
        .map((a) => a.status)
        .sort(),
    ).toEqual([200, 201]);
    const clash = answers.slice(6, 8).map((a) => a.status);
    expect([...clash].sort()).toEqual([201, 409]);
    const loser = clash[0] === 409 ? 'clashA' : 'clashB';
    expect(JSON.parse(answerBody(loser))).toMatchObject({ code: 'conflict' });
    bodies.set('same.bin', same);
    bodies.set('clash.bin', clash[0] === 201 ? clashA : clashB);
    await link.clear();

    // Each name is published once, with exactly the bytes of the upload that won.
    const { rows } = await d.topology.pool.query<{ name: string; sha256: string; size_bytes: string }>(
      `SELECT name, sha256, size_bytes::text FROM arkvory_artifacts WHERE repository = 'shared' AND name <> 'big.bin' ORDER BY name`,
    );
    expect(rows.map((r) => r.name)).toEqual([...bodies.keys()].sort());
    for (const row of rows) {
      const bytes = bodies.get(row.name)!;
      expect([row.sha256, Number(row.size_bytes)]).toEqual([sha256(bytes), bytes.length]);
      const res = await fetch(`${d.routerUrl}/api/v1/repositories/shared/artifacts/${row.name}/content`, {
        headers: { authorization: `Bearer ${d.readKey}` },
      });
      expect(sha256(Buffer.from(await res.arrayBuffer()))).toBe(row.sha256);
    }

    // Nothing half-published on the store: tmp/ is empty, every blob is whole and named by its bytes.
    expect(filesUnder(path.join(d.topology.storeRoot, 'tmp'))).toEqual([]);
    const blobs = filesUnder(path.join(d.topology.storeRoot, 'blobs'));
    for (const blob of blobs) expect(sha256(readFileSync(blob)), blob).toBe(path.basename(blob));
    for (const row of rows) expect(blobs.map((b) => path.basename(b))).toContain(row.sha256);

    // Committed stagings equal the 201 and 200 answers (the writer's own count: the same bytes again
    // are committed too, in place of what is under their blob name); the writer kept its lease.
    const metrics = await (await fetch(`${d.writer.url}/metrics`)).text();
    const committed = Number(
      /^arkvory_storage_uploads_total\{outcome="committed"\} (\d+)/m.exec(metrics)?.[1] ?? Number.NaN,
    );
    // +1: the setup's big.bin.
    expect(committed).toBe(answers.filter((a) => a.status === 201 || a.status === 200).length + 1);
    expect((await fetch(`${d.writer.url}/health/status`)).status).toBe(200);
    expect(d.writer.logLines().some((l) => String(l.msg).startsWith('fenced:'))).toBe(false);
  }, 150_000);
});

describe('scenario 6: the writer host partitioned from everything', () => {
  it('answers writes through the router with 503 unavailable, keeps reads on the readers, and loses nothing', async () => {
    const { topology } = d;
    const second = randomBytes(300_000);
    const secondFile = path.join(d.downloads, 'second.upload');
    writeFileSync(secondFile, second);
    const secondUrl = `${d.routerUrl}/api/v1/repositories/shared/artifacts/second.bin`;
    const answer = path.join(d.downloads, 'answer');
    const upload = async () => {
      const res = await topology.run('client', 'curl', [
        '-sS',
        '-o',
        answer,
        '-w',
        '%{http_code} %header{retry-after}',
        '-H',
        `Authorization: Bearer ${d.writeKey}`,
        '-H',
        'content-type: application/octet-stream',
        '-T',
        secondFile,
        secondUrl,
      ]);
      return { status: res.stdout, body: readFileSync(answer, 'utf8'), stderr: res.stderr };
    };

    const catalog = async () =>
      (
        await topology.pool.query<{ name: string; sha256: string }>(
          `SELECT name, sha256 FROM arkvory_artifacts WHERE repository = 'shared' ORDER BY name`,
        )
      ).rows;
    const before = await catalog();
    setLink(topology.hosts.writer, false);
    try {
      await waitUntil(async () => (await routerHealthy(d.routerUrl)).writer === false, {
        what: 'the router to mark the writer unavailable',
        timeoutMs: 2 * PROBE_MS + 5000,
        intervalMs: 50,
        retryOnError: true,
      });
      const refused = await upload();
      expect(refused.status, refused.stderr).toBe('503 2');
      expect(JSON.parse(refused.body)).toMatchObject({ code: 'unavailable' });

      for (let i = 0; i < 4; i++) {
        const id = `s6-read-${i}`;
        const res = await fetchOnClient(d, id);
        expect(res.code, res.stderr).toBe(0);
        expect(sha256(readDownload(d, id))).toBe(sha256(d.file));
        expect([d.readers[0].url, d.readers[1].url]).toContain((await routerLineFor(d, id)).backend);
      }
      // Cut from PostgreSQL, the writer fences itself within its 8 s permit.
      await waitUntil(() => d.writer.logLines().some((l) => String(l.msg).startsWith('fenced:')), {
        what: 'the writer to fence',
        timeoutMs: 15_000,
        intervalMs: 100,
        // A timeout shows the writer's log tail: what it did instead.
        process: d.writer,
      }).catch(withLeaseLines(d.writer));
    } finally {
      setLink(topology.hosts.writer, true);
    }

    // Healed, the fenced writer stays 503 until it is restarted; its replacement waits out the reservation.
    // A connection in the first moments after the heal may still be reset (seen once: write
    // ECONNRESET); what the writer answers is the point, so a failed connection is tried again.
    let healedStatus = 0;
    await waitUntil(
      async () => {
        healedStatus = (await fetch(`${d.writer.url}/health/status`)).status;
        return true;
      },
      { what: 'the healed writer to answer', timeoutMs: 5000, intervalMs: 100, retryOnError: true },
    );
    expect(healedStatus).toBe(503);
    await d.writer.stop('SIGTERM', 5000);
    const writer = await topology.startGateway('writer', {
      role: 'api',
      slot: 0,
      env: { ARKVORY_DATABASE_URL: link.databaseUrl },
    });
    await waitUntil(async () => (await routerHealthy(d.routerUrl)).writer === true, {
      what: 'the router to see the new writer',
      timeoutMs: 20_000,
      intervalMs: 100,
      retryOnError: true,
    });

    const old = await curlOnClient(d, [
      '--fail',
      '-o',
      path.join(d.downloads, 'after'),
      `${d.routerUrl}${d.contentPath}`,
    ]);
    expect(old.code, old.stderr).toBe(0);
    expect(sha256(readDownload(d, 'after'))).toBe(sha256(d.file));
    const retried = await upload();
    expect(retried.status, retried.body).toMatch(/^201 /);
    const back = await curlOnClient(d, ['--fail', '-o', path.join(d.downloads, 'second.back'), `${secondUrl}/content`]);
    expect(back.code, back.stderr).toBe(0);
    expect(sha256(readDownload(d, 'second.back'))).toBe(sha256(second));
    const { rows } = await topology.pool.query<{ name: string; sha256: string }>(
      `SELECT name, sha256 FROM arkvory_artifacts WHERE repository = 'shared' AND name IN ('big.bin', 'second.bin') ORDER BY 1`,
    );
    expect(rows).toEqual([
      { name: 'big.bin', sha256: sha256(d.file) },
      { name: 'second.bin', sha256: sha256(second) },
    ]);
    // Everything published before the partition is still there, unchanged; only second.bin was added.
    expect(await catalog()).toEqual(
      [...before, { name: 'second.bin', sha256: sha256(second) }].sort((a, b) => a.name.localeCompare(b.name)),
    );
    expect(writer.isRunning()).toBe(true);
  }, 150_000);
});
