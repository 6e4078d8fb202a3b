/**
 * API contract fuzzing with schemathesis (PyPI) over proxy/openapi/openapi.yaml against a real
 * writer, once with an admin key and once with a read-only key, then against a reader of the shared
 * profile (GET and HEAD, read-only key): zero 5xx answers, zero responses outside the document
 * (status, content type, headers, body schema), and the gateway alive at the end.
 * `.ci/run` installs the pinned schemathesis into a venv under the tools dir and puts it on PATH.
 * ARKVORY_FUZZ_SEED reproduces a run (the seed is printed on failure); ARKVORY_FUZZ_MAX_EXAMPLES widens it.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createRepository, createServiceAccount } from '../support/auth.ts';
import { randomContent, request } from '../support/content.ts';
import { createTestDatabase, type TestDatabase } from '../support/database.ts';
import { makeTempDir, ROOT, startGateway, type GatewayProcess } from '../support/gateway.ts';

/** The version `.ci/run` installs; another one still runs, with a note in the failure message. */
const SCHEMATHESIS_VERSION = '4.32.5';
const INSTALL_HINT = `install it with \`bash .ci/run\` (venv under \${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}), or: python3 -m venv /root/.cache/arkvory-tools/schemathesis-${SCHEMATHESIS_VERSION} && /root/.cache/arkvory-tools/schemathesis-${SCHEMATHESIS_VERSION}/bin/pip install schemathesis==${SCHEMATHESIS_VERSION} && ln -sf ../schemathesis-${SCHEMATHESIS_VERSION}/bin/schemathesis /root/.cache/arkvory-tools/bin/schemathesis (and put that bin on PATH)`;
const SEED = Number(process.env.ARKVORY_FUZZ_SEED ?? 18);
/**
 * Per operation, for the fuzzing phase only: the coverage phase (about 2,900 cases per run, every
 * operation) and the examples are not bounded by it. Generating a fuzzed case costs about ten
 * times a coverage case, so at 15 the fuzzing phase was two thirds of the file's time.
 */
const MAX_EXAMPLES = Number(process.env.ARKVORY_FUZZ_MAX_EXAMPLES ?? 5);
/** The checks that say "no 5xx" and "every response is one the document describes". */
const CHECKS = [
  'not_a_server_error',
  'status_code_conformance',
  'content_type_conformance',
  'response_headers_conformance',
  'response_schema_conformance',
];
const SPEC = path.join(ROOT, 'proxy/openapi/openapi.yaml');
const CONFIG = `
[dictionaries.repos]
values = ["fuzz"]
[dictionaries.artifacts]
values = ["seed.bin"]
[dictionaries.principals]
values = ["fuzz-reader"]
[parameters]
"path.repo" = { dictionary = "repos", probability = 0.6 }
"path.repository" = { dictionary = "repos", probability = 0.6 }
"path.id" = { dictionary = "artifacts", probability = 0.6 }
"path.principal" = { dictionary = "principals", probability = 0.5 }
`;

/**
 * The fuzz gateways' rules: the shipped auth-failure ban (20 guesses a minute, then 15 minutes of
 * 429 for the address) only logged. Every run sends malformed and unknown keys by design; with the
 * ban enforcing, after its first seconds 104 of the 117 operations answered mostly 429, and a 500
 * of every paged listing (limit=1000) went unseen at any example count.
 */
const RULES = `
rate_limits:
  auth_failure:
    - name: ban_ip_after_auth_failures
      action: log
      characteristics: [ip]
      limit: 20
      period_s: 60
`;

let db: TestDatabase & { drop(): Promise<void> };
let gateway: GatewayProcess;
let adminKey: string;
let readKey: string;
let reportDir: string;

const rulesFile = () => path.join(reportDir, 'rate_limits.yaml');

function run(
  command: string,
  args: string[],
  timeoutMs: number,
  cwd = ROOT,
): Promise<{ code: number | null; output: string; missing: boolean }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', SCHEMATHESIS_TELEMETRY: 'false' },
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve({ code: null, output: err.message, missing: err.code === 'ENOENT' });
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output, missing: false });
    });
  });
}

beforeAll(async () => {
  const version = await run('schemathesis', ['--version'], 30_000);
  if (version.missing) throw new Error(`schemathesis is not on PATH; ${INSTALL_HINT}`);
  if (!version.output.includes(SCHEMATHESIS_VERSION))
    process.stderr.write(`note: schemathesis ${version.output.trim()} on PATH; .ci/run pins ${SCHEMATHESIS_VERSION}\n`);
  db = await createTestDatabase();
  await createRepository(db.pool, 'fuzz');
  ({ key: adminKey } = await createServiceAccount(db.pool, {
    name: 'fuzz-admin',
    scopes: ['read', 'write', 'admin'],
    grants: { fuzz: 'write' },
  }));
  ({ key: readKey } = await createServiceAccount(db.pool, {
    name: 'fuzz-reader',
    scopes: ['read'],
    grants: { fuzz: 'read' },
  }));
  reportDir = await makeTempDir('arkvory-fuzz-');
  // Found in the working directory: path parameters often take names that exist, so the fuzzer
  // reaches past 404 into real content, grants and principals (the rest stay generated).
  await writeFile(path.join(reportDir, 'schemathesis.toml'), CONFIG);
  await writeFile(rulesFile(), RULES);
  gateway = await startGateway({
    env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_RATE_LIMITS_FILE: rulesFile() },
    timeoutMs: 60_000,
  });
  const put = await request(`${gateway.url}/api/v1/repositories/fuzz/artifacts/seed.bin`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/octet-stream' },
    body: randomContent(4096),
  });
  expect(put.status).toBe(201);
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await db?.drop();
});

async function fuzz(label: string, key: string, target: GatewayProcess = gateway, extra: string[] = []): Promise<void> {
  const junit = path.join(reportDir, `${label}.xml`);
  const args = [
    'run',
    SPEC,
    '--url',
    target.url,
    '--header',
    `Authorization: Bearer ${key}`,
    '--checks',
    CHECKS.join(','),
    '--max-examples',
    String(MAX_EXAMPLES),
    '--seed',
    String(SEED),
    '--workers',
    '1',
    '--request-timeout',
    '20',
    '--phases',
    'examples,coverage,fuzzing',
    '--suppress-health-check',
    'too_slow',
    '--report',
    'junit',
    '--report-junit-path',
    junit,
    ...extra,
  ];
  // cwd: the temp dir, where schemathesis keeps its example database (removed with it).
  const result = await run('schemathesis', args, 360_000, reportDir);
  const report = await readFile(junit, 'utf8').catch(() => '');
  const tail = result.output.slice(-15_000);
  expect(result.code, `schemathesis (${label} key, seed ${SEED}) found problems:\n${tail}`).toBe(0);
  // The report proves operations ran (an empty run would also exit 0).
  expect(Number(/<testsuites[^>]*\btests="(\d+)"/.exec(report)?.[1] ?? 0), report.slice(0, 2000)).toBeGreaterThan(30);
  const live = await request(`${target.url}/health/live`);
  expect(live.status).toBe(200);
  expect(target.child.exitCode).toBeNull();
}

describe('schemathesis over the OpenAPI document against a live writer', () => {
  // The read-only run first: the admin run may disable the reader's principal or remove its grant.
  it('read-only key: no 5xx, every response as documented, the gateway alive', async () => {
    await fuzz('read-only', readKey);
  }, 420_000);

  it('admin key: no 5xx, every response as documented, the gateway alive', async () => {
    await fuzz('admin', adminKey);
  }, 420_000);

  it('a reader of the shared profile, read-only key, its methods (GET, HEAD): no 5xx, as documented, alive', async () => {
    // A database of its own: the shared profile's writer (slot 0) and one reader (slot 1) on one root.
    const shared = await createTestDatabase();
    const gateways: GatewayProcess[] = [];
    try {
      await createRepository(shared.pool, 'fuzz');
      const { key: writeKey } = await createServiceAccount(shared.pool, {
        name: 'fuzz-writer',
        grants: { fuzz: 'write' },
      });
      const { key } = await createServiceAccount(shared.pool, {
        name: 'fuzz-reader',
        scopes: ['read'],
        grants: { fuzz: 'read' },
      });
      const dataDir = await makeTempDir();
      const env = (role: string, slot: number) => ({
        ARKVORY_DATABASE_URL: shared.url,
        ARKVORY_REDIS_URL: inject('redisUrl'),
        ARKVORY_ROLE: role,
        ARKVORY_GATEWAY_SLOTS: '2',
        ARKVORY_GATEWAY_SLOT: String(slot),
        ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: String(64 * 1024 * 1024),
        ARKVORY_RATE_LIMITS_FILE: rulesFile(),
      });
      const writer = await startGateway({ env: env('api', 0), dataDir, timeoutMs: 60_000 });
      gateways.push(writer);
      const put = await request(`${writer.url}/api/v1/repositories/fuzz/artifacts/seed.bin`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${writeKey}`, 'content-type': 'application/octet-stream' },
        body: randomContent(4096),
      });
      expect(put.status).toBe(201);
      const reader = await startGateway({ env: env('reader', 1), dataDir, timeoutMs: 60_000 });
      gateways.push(reader);
      // Every other method is refused by a reader before routing (405 read_only, the document's
      // x-arkvory-any-request), which schemathesis cannot read from the document.
      await fuzz('reader', key, reader, ['--include-method', 'GET', '--include-method', 'HEAD']);
    } finally {
      for (const g of gateways.reverse()) await g.stop();
      await shared.drop();
    }
  }, 420_000);
});
