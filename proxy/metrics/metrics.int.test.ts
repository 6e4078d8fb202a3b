/**
 * `/metrics` on live processes: a writer (main port, bearer token) and a reader (loopback metrics
 * port) of the shared profile, scraped after uploads, paced downloads, refusals and lease renewals.
 * Every family of the catalogue must be exported with sane values, docs/metrics.md must list
 * exactly what is exported, and no label value may carry a principal id, key, path or file name.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { makeTempDir, ROOT, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { ALL_METRICS, GATEWAY_METRICS } from './catalogue.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';

const KiB = 1024;
const SLOTS = 2;
/** floor(RATE / 2) = 128 KiB/s per gateway: a 320 KiB download waits for tokens. */
const RATE = SLOTS * 128 * KiB;
const TOKEN = 'metrics-token-for-the-test-3b9f';
const REPO = 'metricsrepo';
const ARTIFACT = 'secret-file-name.bin';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

interface Exposition {
  types: Map<string, string>;
  samples: Sample[];
}

/** Prometheus text format 0.0.4: `# TYPE` lines and samples (label values unescaped). */
function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (!m) throw new Error(`unparsable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!.replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { types, samples };
}

function value(e: Exposition, name: string, labels: Record<string, string> = {}): number {
  const matching = e.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (matching.length === 0) throw new Error(`no sample ${name}${JSON.stringify(labels)}`);
  return matching.reduce((sum, s) => sum + s.value, 0);
}

/** The family a sample belongs to (histogram series end in _bucket/_sum/_count). */
function familyOf(e: Exposition, sample: string): string {
  if (e.types.has(sample)) return sample;
  const base = sample.replace(/_(bucket|sum|count)$/, '');
  return base;
}

let db: TestDatabase & { drop(): Promise<void> };
let writer: GatewayProcess;
let reader: GatewayProcess;
let readerMetricsPort: number;
let account: { principalId: string; keyId: string; key: string; name: string };
let admin: { principalId: string; keyId: string; key: string; name: string };
const body = randomContent(320 * KiB);
const artifactPath = `/api/v1/repositories/${REPO}/artifacts/${ARTIFACT}`;

function sharedEnv(role: 'api' | 'reader', slot: number): Record<string, string> {
  return {
    ARKVORY_DATABASE_URL: db.url,
    ARKVORY_REDIS_URL: inject('redisUrl'),
    ARKVORY_REDIS_KEY_PREFIX: `arkvory:metrics:${process.pid}:`,
    ARKVORY_ROLE: role,
    ARKVORY_GATEWAY_SLOTS: String(SLOTS),
    ARKVORY_GATEWAY_SLOT: String(slot),
    ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(RATE),
  };
}

async function scrape(url: string, headers: Record<string, string> = {}): Promise<Exposition> {
  const res = await request(url, { headers });
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseExposition(res.body.toString());
}

beforeAll(async () => {
  db = await createTestDatabase();
  const dataDir = await makeTempDir();
  await createRepository(db.pool, REPO);
  account = await createServiceAccount(db.pool, { scopes: ['read', 'write'], grants: { [REPO]: 'write' } });
  admin = await createServiceAccount(db.pool, { scopes: ['admin'] });
  readerMetricsPort = await freeLoopbackPort();
  writer = await startGateway({
    env: { ...sharedEnv('api', 0), ARKVORY_METRICS_TOKEN: TOKEN },
    dataDir,
    timeoutMs: 90_000,
  });
  reader = await startGateway({
    env: { ...sharedEnv('reader', 1), ARKVORY_METRICS_PORT: String(readerMetricsPort) },
    dataDir,
    timeoutMs: 90_000,
  });

  // Traffic: a published upload, the same bytes again, a conflicting upload, an aborted one,
  // a paced download (the governor makes it wait), a Range read, refusals.
  const put = (data: Buffer, extra: Record<string, string> = {}) =>
    request(`${writer.url}${artifactPath}`, {
      method: 'PUT',
      headers: { ...bearer(account.key), ...extra },
      body: data,
    });
  expect((await put(body)).status).toBe(201);
  expect((await put(body)).status).toBe(200);
  expect((await put(randomContent(1000))).status).toBe(409);
  expect(
    (await put(randomContent(1000), { 'content-digest': `sha-256=:${Buffer.alloc(32).toString('base64')}:` })).status,
  ).toBe(400);
  const download = await request(`${reader.url}${artifactPath}/content`, { headers: bearer(account.key) });
  expect(download.status).toBe(200);
  expect(download.body.equals(body)).toBe(true);
  expect(
    (
      await request(`${reader.url}${artifactPath}/content`, {
        headers: { ...bearer(account.key), range: 'bytes=0-99' },
      })
    ).status,
  ).toBe(206);
  expect(
    (
      await request(`${reader.url}${artifactPath}/content`, {
        headers: bearer('ark_notarealkey000_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'),
      })
    ).status,
  ).toBe(401);
  expect((await request(`${writer.url}/api/v1/admin/principals`, { headers: bearer(admin.key) })).status).toBe(200);
  expect((await request(`${writer.url}/health/ready`, { headers: bearer(account.key) })).status).toBe(200);
  // The lease renews 2 s after each confirmation: make sure one renewal has happened on both.
  await new Promise((resolve) => setTimeout(resolve, 2500));
}, 240_000);

afterAll(async () => {
  await Promise.all([writer, reader].filter(Boolean).map((g) => g.stop('SIGTERM')));
  await db?.drop();
});

describe('/metrics access', () => {
  it('the main port asks for the token when ARKVORY_METRICS_TOKEN is set, and takes no API key instead', async () => {
    const anonymous = await request(`${writer.url}/metrics`);
    expect(anonymous.status).toBe(401);
    expect(JSON.parse(anonymous.body.toString())).toMatchObject({ code: 'unauthorized' });
    expect(anonymous.headers['www-authenticate']).toMatch(/^Bearer /);
    expect((await request(`${writer.url}/metrics`, { headers: bearer(account.key) })).status).toBe(401);
    expect((await request(`${writer.url}/metrics`, { headers: bearer(`${TOKEN}x`) })).status).toBe(401);
    expect((await request(`${writer.url}/metrics`, { headers: bearer(TOKEN) })).status).toBe(200);
  });

  it('with ARKVORY_METRICS_PORT the main port has no /metrics and the loopback port serves it', async () => {
    expect((await request(`${reader.url}/metrics`)).status).toBe(404);
    const res = await request(`http://127.0.0.1:${readerMetricsPort}/metrics`);
    expect(res.status).toBe(200);
    expect((await request(`http://127.0.0.1:${readerMetricsPort}/other`)).status).toBe(404);
  });

  it.each([
    ['the main port', () => `${writer.url}/metrics`, bearer(TOKEN)],
    ['the metrics port', () => `http://127.0.0.1:${readerMetricsPort}/metrics`, {}],
  ])('on %s a flood of scrapes shares renderings begun at least 250 ms apart', async (_, url, headers) => {
    // Scrapes at once share renderings (the first may start one alone, the rest wait for the next):
    // the same figures, though each scrape finished adds a request to them.
    const together = await Promise.all(Array.from({ length: 20 }, () => request(url(), { headers })));
    expect(together.map((res) => res.status)).toEqual(Array(20).fill(200));
    expect(new Set(together.map((res) => res.body.toString())).size).toBeLessThanOrEqual(2);
    // One after another, each waits for a rendering begun 250 ms after the previous one's start.
    const startedMs = performance.now();
    for (let i = 0; i < 5; i++) expect((await request(url(), { headers })).status).toBe(200);
    expect(performance.now() - startedMs).toBeGreaterThanOrEqual(4 * 250 - 5);
  });
});

describe('metric families after traffic', () => {
  let w: Exposition;
  let r: Exposition;
  beforeAll(async () => {
    w = await scrape(`${writer.url}/metrics`, bearer(TOKEN));
    r = await scrape(`http://127.0.0.1:${readerMetricsPort}/metrics`);
  });

  it('both processes export every family of the catalogue with its declared type', () => {
    for (const e of [w, r]) {
      for (const spec of ALL_METRICS) expect(e.types.get(spec.name), spec.name).toBe(spec.type);
    }
  });

  it('request counts and latencies by route template and status', () => {
    const content = '/api/v1/repositories/:repo/artifacts/:id/content';
    expect(
      value(w, 'arkvory_http_requests_total', {
        method: 'PUT',
        route: '/api/v1/repositories/:repo/artifacts/:id',
        status: '201',
      }),
    ).toBe(1);
    expect(
      value(w, 'arkvory_http_requests_total', {
        method: 'PUT',
        route: '/api/v1/repositories/:repo/artifacts/:id',
        status: '409',
      }),
    ).toBe(1);
    expect(value(r, 'arkvory_http_requests_total', { method: 'GET', route: content, status: '200' })).toBe(1);
    expect(value(r, 'arkvory_http_requests_total', { method: 'GET', route: content, status: '206' })).toBe(1);
    expect(value(r, 'arkvory_http_requests_total', { method: 'GET', route: content, status: '401' })).toBe(1);
    // The paced download took about a second or more: it lands in a bucket above 0.25 s.
    const count = value(r, 'arkvory_http_request_duration_seconds_count', {
      method: 'GET',
      route: content,
      status: '200',
    });
    const fast = value(r, 'arkvory_http_request_duration_seconds_bucket', {
      method: 'GET',
      route: content,
      status: '200',
      le: '0.25',
    });
    expect(count).toBe(1);
    expect(fast).toBe(0);
    expect(
      value(r, 'arkvory_http_request_duration_seconds_sum', { method: 'GET', route: content, status: '200' }),
    ).toBeGreaterThan(0.5);
  });

  it('bytes per direction cover the bodies moved', () => {
    expect(value(w, 'arkvory_http_bytes_total', { direction: 'in' })).toBeGreaterThan(body.length);
    expect(value(r, 'arkvory_http_bytes_total', { direction: 'out' })).toBeGreaterThan(body.length);
  });

  it('governor grants and waits, per direction', () => {
    expect(value(r, 'arkvory_bandwidth_granted_bytes_total', { direction: 'download' })).toBe(body.length + 100);
    expect(value(r, 'arkvory_bandwidth_granted_quanta_total', { direction: 'download' })).toBeGreaterThan(1);
    expect(value(r, 'arkvory_bandwidth_waited_quanta_total', { direction: 'download' })).toBeGreaterThan(0);
    expect(value(r, 'arkvory_bandwidth_waiting_quanta', { direction: 'download' })).toBe(0);
    expect(value(r, 'arkvory_bandwidth_limit_bytes_per_second', { direction: 'download', scope: 'process' })).toBe(
      RATE / SLOTS,
    );
    // Uploads: the 201 body and the two later uploads were granted too (no upload ceiling set).
    expect(value(w, 'arkvory_bandwidth_granted_bytes_total', { direction: 'upload' })).toBeGreaterThanOrEqual(
      2 * body.length,
    );
    expect(value(w, 'arkvory_bandwidth_rejected_total', { direction: 'upload' })).toBe(0);
  });

  it('admission: nothing active or queued at rest, nothing rejected', () => {
    for (const e of [w, r]) {
      expect(value(e, 'arkvory_admission_active', { kind: 'download' })).toBe(0);
      expect(value(e, 'arkvory_admission_queued', { kind: 'upload' })).toBe(0);
      expect(value(e, 'arkvory_admission_rejected_total', { kind: 'download' })).toBe(0);
    }
  });

  it('lease: held, renewed with measured latency, never fenced', () => {
    for (const e of [w, r]) {
      expect(value(e, 'arkvory_lease_state', { state: 'held' })).toBe(1);
      expect(value(e, 'arkvory_lease_state', { state: 'fenced' })).toBe(0);
      expect(value(e, 'arkvory_lease_renewals_total', { outcome: 'confirmed' })).toBeGreaterThanOrEqual(1);
      expect(value(e, 'arkvory_lease_renewals_total', { outcome: 'rejected' })).toBe(0);
      const renewals = value(e, 'arkvory_lease_renewal_duration_seconds_count');
      expect(renewals).toBeGreaterThanOrEqual(1);
      expect(value(e, 'arkvory_lease_renewal_duration_seconds_sum') / renewals).toBeLessThan(2);
      expect(value(e, 'arkvory_lease_fencing_events_total')).toBe(0);
    }
  });

  it('storage: the publish and the same bytes again committed, the conflict discarded, one failed staging', () => {
    expect(value(w, 'arkvory_storage_uploads_total', { outcome: 'committed' })).toBe(2);
    expect(value(w, 'arkvory_storage_uploads_total', { outcome: 'discarded' })).toBe(1);
    expect(value(w, 'arkvory_storage_uploads_total', { outcome: 'failed' })).toBe(1);
    expect(value(r, 'arkvory_storage_uploads_total')).toBe(0);
  });

  it('rate limits: one check per request by limiter, rule evaluations by rule', () => {
    expect(value(r, 'arkvory_rate_limit_checks_total', { limiter: 'gateway_request' })).toBeGreaterThanOrEqual(2);
    expect(value(r, 'arkvory_rate_limit_checks_total', { limiter: 'auth_failure' })).toBeGreaterThanOrEqual(1);
    expect(
      value(r, 'arkvory_rate_limit_rule_evaluations_total', {
        limiter: 'gateway_request',
        rule: 'limit_requests_by_principal',
      }),
    ).toBeGreaterThanOrEqual(2);
    // Spec 1.10: calls_total and errors_total were removed (peeks_total covers peek errors, clear is
    // log-only); exactly the spec's families are exported.
    for (const e of [w, r]) {
      for (const removed of ['arkvory_rate_limit_calls_total', 'arkvory_rate_limit_errors_total']) {
        expect(e.types.has(removed)).toBe(false);
        expect(e.samples.filter((s) => s.name === removed)).toEqual([]);
      }
      const families = [...e.types.keys()].filter((n) => n.startsWith('arkvory_rate_limit_')).sort();
      // The rules-service lookups counter is Phase 3's own family (docs/rate-limits.md), not a check counter.
      expect(families).toEqual([
        'arkvory_rate_limit_checks_total',
        'arkvory_rate_limit_peeks_total',
        'arkvory_rate_limit_rule_evaluations_total',
        'arkvory_rate_limit_rules_service_requests_total',
      ]);
    }
  });

  it('process metrics are live', () => {
    for (const e of [w, r]) {
      expect(value(e, 'process_resident_memory_bytes')).toBeGreaterThan(10 * 1024 * 1024);
      expect(value(e, 'process_start_time_seconds')).toBeGreaterThan(Date.now() / 1000 - 600);
      expect(value(e, 'nodejs_version_info')).toBe(1);
    }
  });

  it('no label value carries a principal id, key, key id, repository, path or file name', () => {
    const forbidden = [
      account.principalId,
      account.key,
      account.keyId,
      admin.principalId,
      admin.key,
      admin.keyId,
      REPO,
      ARTIFACT,
      artifactPath,
      TOKEN,
    ];
    for (const e of [w, r]) {
      for (const sample of e.samples) {
        for (const labelValue of Object.values(sample.labels)) {
          for (const secret of forbidden)
            expect(
              labelValue.includes(secret),
              `${sample.name}${JSON.stringify(sample.labels)} carries ${secret}`,
            ).toBe(false);
        }
      }
    }
    // Routes are templates only.
    const routes = new Set(r.samples.flatMap((s) => (s.labels.route ? [s.labels.route] : [])));
    for (const route of routes) expect(route === 'unmatched' || /^\/[a-z0-9/:_-]*$/.test(route), route).toBe(true);
  });

  it('docs/metrics.md lists exactly the families /metrics exports, with their types and labels', async () => {
    // The router's families have their own section (checked by router-client-faults.int.test.ts).
    const doc = (await readFile(path.join(ROOT, 'docs/metrics.md'), 'utf8')).split('\n## Router metrics')[0]!;
    const rows = [...doc.matchAll(/^\| `([a-z0-9_:]+)` \| (counter|gauge|histogram) \| ([^|]*) \|/gm)].map((m) => ({
      name: m[1]!,
      type: m[2]!,
      labels: [...m[3]!.matchAll(/`([a-z_]+)`/g)].map((l) => l[1]!),
    }));
    const documented = new Map(rows.map((row) => [row.name, row]));
    const exported = new Set(w.samples.map((s) => familyOf(w, s.name)).concat([...w.types.keys()]));
    expect([...documented.keys()].sort()).toEqual([...exported].sort());
    for (const spec of ALL_METRICS) {
      expect(documented.get(spec.name), spec.name).toEqual({
        name: spec.name,
        type: spec.type,
        labels: [...spec.labels],
      });
    }
    // And every sample's labels are the declared ones.
    for (const sample of [...w.samples, ...r.samples]) {
      const spec = ALL_METRICS.find((m) => m.name === familyOf(w, sample.name));
      const extra = spec?.type === 'histogram' && sample.name.endsWith('_bucket') ? ['le'] : [];
      expect(Object.keys(sample.labels).sort(), sample.name).toEqual([...(spec?.labels ?? []), ...extra].sort());
    }
    expect(GATEWAY_METRICS.every((m) => m.name.startsWith('arkvory_'))).toBe(true);
  });
});
