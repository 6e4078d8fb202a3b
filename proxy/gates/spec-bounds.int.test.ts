/**
 * Spec bounds checked over HTTP against real gateway processes (issue #21): admission of one upload
 * per principal with 429 `busy` + Retry-After, upload pacing on the directory store and of
 * multipart parts (bounded by rate·t + burst, within a few percent of the rate) with independent
 * upload and download budgets, the rate-limit window (Retry-After is the window's end and exactly
 * `limit` requests pass in the next one), readiness bodies free of ids, names and keys, and a
 * multi-range download paced as every body byte the client gets.
 */
import { writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, type RawResponse } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';

const db = useTestDatabase();
/**
 * Each bound is checked on a gateway of one process and on one instance of two workers
 * (ARKVORY_WORKERS=2): the same assertions, since the bounds are the instance's.
 */
const WORKER_COUNTS = [1, 2] as const;

/** A PUT whose body trickles until `finish()`: it holds its admission slot meanwhile. */
function slowUpload(
  gw: GatewayProcess,
  repo: string,
  id: string,
  key: string,
): { finish(): void; done: Promise<number> } {
  const req = http.request(`${gw.url}/api/v1/repositories/${repo}/artifacts/${id}`, {
    method: 'PUT',
    headers: { ...bearer(key), 'transfer-encoding': 'chunked' },
    agent: false,
  });
  const done = new Promise<number>((resolve, reject) => {
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
  });
  req.write(randomContent(1024));
  return {
    finish: () => req.end(randomContent(1024)),
    done,
  };
}

describe.each(WORKER_COUNTS)('admission over HTTP (ADR 0008), %i worker(s)', (workers) => {
  // One database for the file: each instance's run has its own repository.
  const repo = `adm-${workers}`;
  it('one upload per principal: a second one of the same principal gets 429 busy with Retry-After; another principal is not held up', async () => {
    await createRepository(db.pool, repo);
    const a = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
    const b = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: String(workers), ARKVORY_ADMISSION_QUEUE_LENGTH: '0' },
    });
    const first = slowUpload(gw, repo, 'a1.bin', a.key);
    // Wait until the first upload holds its slot (readiness counts it).
    for (let i = 0; ; i++) {
      const ready = JSON.parse(
        (await request(`${gw.url}/health/ready`, { headers: bearer(b.key) })).body.toString(),
      ) as { transfers: { uploads: { active: number } } };
      if (ready.transfers.uploads.active === 1) break;
      if (i > 100) throw new Error('the first upload never became active');
      await sleep(50);
    }
    const second = await request(`${gw.url}/api/v1/repositories/${repo}/artifacts/a2.bin`, {
      method: 'PUT',
      headers: bearer(a.key),
      body: randomContent(1024),
    });
    expect(second.status).toBe(429);
    expect(JSON.parse(second.body.toString())).toMatchObject({ code: 'busy' });
    expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // Another principal uploads at the same time.
    const other = await request(`${gw.url}/api/v1/repositories/${repo}/artifacts/b1.bin`, {
      method: 'PUT',
      headers: bearer(b.key),
      body: randomContent(1024),
    });
    expect(other.status).toBe(201);
    first.finish();
    expect(await first.done).toBe(201);
    // The slot is free again: the same principal uploads once more.
    expect(
      (
        await request(`${gw.url}/api/v1/repositories/${repo}/artifacts/a2.bin`, {
          method: 'PUT',
          headers: bearer(a.key),
          body: randomContent(1024),
        })
      ).status,
    ).toBe(201);
    // Readiness aggregates carry no ids, names, keys or paths (ADR 0008).
    const readyText = (await request(`${gw.url}/health/ready`, { headers: bearer(a.key) })).body.toString();
    for (const secret of [
      a.principalId,
      a.name,
      a.keyId,
      a.key,
      b.principalId,
      b.name,
      b.keyId,
      repo,
      'a1.bin',
      'a2.bin',
      'b1.bin',
    ])
      expect(readyText).not.toContain(secret);
    expect(await gw.stop()).toBe(0);
  });
});

describe.each(WORKER_COUNTS)('bandwidth pacing over HTTP (directory store), %i worker(s)', (workers) => {
  const RATE = 1024 * 1024; // bytes per second, each direction
  const BURST = Math.floor(RATE / 10); // ADR 0008: min(rate / 10, 1 MiB)
  /** Long enough that the burst and the sampling jitter are small beside the paced stretch. */
  const SIZE = 6 * RATE;
  /** "Within a few percent of the rate". */
  const TOLERANCE = 0.03;
  /** The gateway's clock is read in whole microseconds (token-bucket.ts): at most this many bytes of rounding. */
  const ROUNDING = Math.ceil(RATE / 1_000_000);
  const EVERY_MS = 250;

  interface Sample {
    /** performance.now() when the scrape was sent and when its answer arrived (ms, monotonic). */
    sent: number;
    received: number;
    /** The gateway's own counts for the direction: bytes its governor granted, and ceiling lost to late wake-ups. */
    granted: number;
    lateDropped: number;
  }

  async function scrape(gw: GatewayProcess, direction: 'upload' | 'download'): Promise<Sample> {
    const sent = performance.now();
    const res = await request(`${gw.url}/metrics`);
    const received = performance.now();
    expect(res.status).toBe(200);
    const read = (family: string) => {
      const line = new RegExp(`^${family}\\{direction="${direction}"\\} (\\d+)$`, 'm').exec(res.body.toString());
      if (!line) throw new Error(`no ${family}{direction="${direction}"} in /metrics`);
      return Number(line[1]);
    };
    return {
      sent,
      received,
      granted: read('arkvory_bandwidth_granted_bytes_total'),
      lateDropped: read('arkvory_bandwidth_late_dropped_bytes_total'),
    };
  }

  /** Runs `work` while sampling the gateway's counters of `direction` every EVERY_MS. */
  async function sampled<T>(
    gw: GatewayProcess,
    direction: 'upload' | 'download',
    work: () => Promise<T>,
  ): Promise<{ value: T; seconds: number; samples: Sample[] }> {
    const samples = [await scrape(gw, direction)];
    let done = false;
    const t0 = performance.now();
    const running = work().finally(() => {
      done = true;
    });
    const sampler = (async () => {
      while (!done) {
        await sleep(EVERY_MS);
        samples.push(await scrape(gw, direction));
      }
    })();
    const value = await running;
    const seconds = (performance.now() - t0) / 1000;
    await sampler;
    samples.push(await scrape(gw, direction));
    return { value, seconds, samples };
  }

  /** Least-squares slope of `ys` over `xs`. */
  function slope(xs: readonly number[], ys: readonly number[]): number {
    const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
    const my = ys.reduce((a, b) => a + b, 0) / ys.length;
    let sxy = 0;
    let sxx = 0;
    for (const [i, x] of xs.entries()) {
      sxy += (x - mx) * (ys[i]! - my);
      sxx += (x - mx) ** 2;
    }
    return sxy / sxx;
  }

  /**
   * ADR 0008's bound, exactly: bytes granted from the start of a transfer by time t ≤ rate·t + burst.
   * Checked by the client (moving SIZE bytes takes at least (SIZE − burst) / rate) and at every
   * sample of the gateway's own counter (granted since the first sample ≤ rate × the longest time
   * that can have passed between the two reads + burst: an idle bucket holds at most its burst).
   *
   * And the governor is not slack: over the paced stretch (burst spent, last quantum not yet
   * granted) the gateway's own granted bytes grow at the rate, within TOLERANCE, per governor time:
   * the time the governor was in charge, i.e. less the ceiling its process lost by waking later than
   * due while a take waited (`arkvory_bandwidth_late_dropped_bytes_total` ÷ rate). On a loaded
   * 2-core machine the OS can run the gateway 100 ms late, past what its burst absorbs; that is the
   * scheduler's share, counted by the gateway, while anything else (a wake-up armed late, a take the
   * stream did not make, a grant not given) still shows as lost rate. Sampling the gateway's counters
   * keeps the request's fixed costs (connection, database, fsync) and the test's own scheduling out.
   */
  function expectPaced(what: string, run: { seconds: number; samples: Sample[] }, floor = 1 - TOLERANCE): void {
    expect(run.seconds, `${what}: faster than rate·t + burst allows`).toBeGreaterThanOrEqual((SIZE - BURST) / RATE);
    const [first, ...rest] = run.samples;
    const start = first!.granted;
    for (const s of rest)
      expect(s.granted - start, `${what}: granted beyond rate·t + burst`).toBeLessThanOrEqual(
        Math.floor((RATE * (s.received - first!.sent)) / 1000) + BURST + ROUNDING,
      );
    expect(run.samples.at(-1)!.granted - start, `${what}: every byte granted`).toBeGreaterThanOrEqual(SIZE);
    const steady = run.samples.filter((s) => s.granted - start >= 2 * BURST && s.granted - start <= SIZE - BURST);
    const xs = steady.map((s) => (s.sent + s.received) / 2000);
    const window = xs.at(-1)! - xs[0]!;
    expect(window, `${what}: paced stretch sampled`).toBeGreaterThan(3);
    const late = (steady.at(-1)!.lateDropped - steady[0]!.lateDropped) / RATE;
    const governorTime = (s: Sample, i: number) => xs[i]! - (s.lateDropped - steady[0]!.lateDropped) / RATE;
    const rate =
      slope(
        steady.map(governorTime),
        steady.map((s) => s.granted),
      ) / RATE;
    const wallRate =
      slope(
        xs,
        steady.map((s) => s.granted),
      ) / RATE;
    const report = `${(rate * 100).toFixed(2)} % of the rate per governor time (${(wallRate * 100).toFixed(2)} % per wall time, ${(late * 1000).toFixed(0)} ms late) over ${window.toFixed(2)} s, ${steady.length} samples`;
    if (process.env.ARKVORY_PACING_REPORT) console.log(`${what}: ${report}`);
    expect(rate, `${what}: ${report}`).toBeGreaterThan(floor);
    expect(rate, `${what}: ${report}`).toBeLessThan(1 + TOLERANCE);
  }

  it('paces a whole upload and a multipart part at the ceiling, and upload and download budgets are independent', async () => {
    // One database for the file: each instance's run has its own repository.
    const repo = `pace-${workers}`;
    await createRepository(db.pool, repo);
    const sa = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_WORKERS: String(workers),
        ARKVORY_UPLOAD_BYTES_PER_SECOND: String(RATE),
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: String(RATE),
      },
    });
    const base = `${gw.url}/api/v1/repositories/${repo}`;
    let n = 0;
    const upload = () =>
      request(`${base}/artifacts/u${++n}.bin`, { method: 'PUT', headers: bearer(sa.key), body: randomContent(SIZE) });

    const whole = await sampled(gw, 'upload', upload);
    expect(whole.value.status).toBe(201);
    expectPaced('whole upload', whole);

    const opened = await request(`${base}/artifacts/p.bin/uploads`, {
      method: 'POST',
      headers: { ...bearer(sa.key), 'content-type': 'application/json' },
      body: Buffer.from('{}'),
    });
    expect(opened.status).toBe(201);
    const id = (JSON.parse(opened.body.toString()) as { upload: string }).upload;
    const part = await sampled(gw, 'upload', () =>
      request(`${base}/uploads/${id}/parts/1`, { method: 'PUT', headers: bearer(sa.key), body: randomContent(SIZE) }),
    );
    expect(part.value.status).toBe(200);
    expectPaced('multipart part', part);

    // At the same time, one download (of u1) and one upload: each direction gets its own full ceiling.
    // Were the budgets shared, each would get half of it.
    let downloadRun: Promise<{ value: RawResponse; seconds: number; samples: Sample[] }> | undefined;
    const up = await sampled(gw, 'upload', async () => {
      downloadRun = sampled(gw, 'download', () =>
        request(`${base}/artifacts/u1.bin/content`, { headers: bearer(sa.key) }),
      );
      const [value] = await Promise.all([upload(), downloadRun]);
      return value;
    });
    const down = await downloadRun!;
    expect(down.value.status).toBe(200);
    expect(down.value.body.length).toBe(SIZE);
    expect(up.value.status).toBe(201);
    // The download is here for independence (a shared budget would give each half). Its path reads
    // each chunk from disk before charging it, not overlapped as uploads write, so a loaded machine
    // stalls it between takes longer than the burst lasts; its floor stays 90 % per governor time.
    expectPaced('download beside an upload', down, 0.9);
    expectPaced('upload beside a download', up);
    expect(await gw.stop()).toBe(0);
  });
});

describe.each(WORKER_COUNTS)('rate-limit window over HTTP, %i worker(s)', (workers) => {
  it('Retry-After is the end of the aligned window, and exactly `limit` requests pass in the next one', async () => {
    const dir = await makeTempDir('arkvory-rules-');
    const file = path.join(dir, 'rate_limits.yaml');
    const LIMIT = 3;
    // Long enough for four requests after a boundary on a loaded machine; the test waits out up to two windows.
    const PERIOD_S = 3;
    await writeFile(
      file,
      `rate_limits:\n  gateway_request:\n    - name: live_by_ip\n      action: limit\n      characteristics: [ip]\n      limit: ${LIMIT}\n      period_s: ${PERIOD_S}\n      match:\n        route: /health/live\n`,
    );
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: String(workers), ARKVORY_RATE_LIMITS_FILE: file },
    });
    const live = () => fetch(`${gw.url}/health/live`);
    // Start right after a window boundary so the whole exchange fits in one window.
    const periodMs = PERIOD_S * 1000;
    await sleep(periodMs - (Date.now() % periodMs) + 50);
    const statuses: number[] = [];
    let blocked: Response | undefined;
    let sentAt = 0;
    let answeredAt = 0;
    for (let i = 0; i <= LIMIT; i++) {
      sentAt = Date.now();
      const r = await live();
      answeredAt = Date.now();
      statuses.push(r.status);
      if (r.status === 429) blocked = r;
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    const windowEndMs = Math.ceil(answeredAt / periodMs) * periodMs;
    expect(Math.ceil(sentAt / periodMs) * periodMs).toBe(windowEndMs); // the 429 was decided in this window
    const retryAfter = Number(blocked!.headers.get('retry-after'));
    // Whole seconds from the server's "now" (between send and answer) to the window's end, rounded up.
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((windowEndMs - answeredAt) / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((windowEndMs - sentAt) / 1000));
    expect(blocked!.headers.get('ratelimit')).toBe(`"live_by_ip";r=0;t=${retryAfter}`);
    await sleep(windowEndMs - Date.now() + 50);
    const next: number[] = [];
    for (let i = 0; i <= LIMIT; i++) next.push((await live()).status);
    expect(next).toEqual([200, 200, 200, 429]);
    expect(await gw.stop()).toBe(0);
  });
});

describe('a multi-range download over HTTP (ADR 0008)', () => {
  it('is paced as the body bytes the client gets, part heads included: 100 one-byte ranges are not 100 bytes', async () => {
    const repo = 'ranges';
    await createRepository(db.pool, repo);
    const sa = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
    // About 40 KB in all at this rate take about 0.9 s paced; unpaced, a local gateway answers the
    // two requests in a small fraction of that.
    const RATE = 40_000;
    const BURST = RATE / 10;
    const gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(RATE) },
    });
    const base = `${gw.url}/api/v1/repositories/${repo}/artifacts/r.bin`;
    const stored = await request(base, {
      method: 'PUT',
      headers: { ...bearer(sa.key), 'content-type': `application/vnd.arkvory.${'x'.repeat(100)}` },
      body: randomContent(20_000),
    });
    expect(stored.status).toBe(201);
    const ranges = `bytes=${Array.from({ length: 100 }, (_, i) => `${i * 200}-${i * 200}`).join(',')}`;
    const startedMs = performance.now();
    let received = 0;
    for (let i = 0; i < 2; i++) {
      const res = await request(`${base}/content`, { headers: { ...bearer(sa.key), range: ranges } });
      expect(res.status).toBe(206);
      expect(res.headers['content-type']).toMatch(/^multipart\/byteranges/);
      received += res.body.length;
    }
    const seconds = (performance.now() - startedMs) / 1000;
    // About 20 KB per answer for 100 bytes of content: the bound is on what the client gets.
    expect(received).toBeGreaterThan(30_000);
    expect(seconds, 'faster than rate·t + burst allows').toBeGreaterThanOrEqual((received - BURST) / RATE);
    const ready = JSON.parse(
      (await request(`${gw.url}/health/ready`, { headers: bearer(sa.key) })).body.toString(),
    ) as {
      transfers: { downloads: { bytesGranted: number } };
    };
    expect(ready.transfers.downloads.bytesGranted).toBe(received);
    expect(await gw.stop()).toBe(0);
  });
});
