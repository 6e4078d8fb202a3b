/**
 * Hostile JSON over real sockets: a body nested thousands of levels deep, to a real gateway and a
 * real reference rules service (`arkvory rules-service serve`), and as a rules service's answer
 * (a real nginx answers for the service: a service of one's own may answer anything). Each is
 * refused as the sender's fault (400 `invalid_request` naming the bound; `invalid` for an answer),
 * never an error line; a body over its route's bound sent chunked is a documented 413.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadOpenApiDocument, undescribedResponses } from '../openapi/contract.ts';
import { RULES_SERVICE_OPENAPI_PATH } from '../openapi/rules-service-contract.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import {
  ARKVORY_BIN,
  freeLoopbackPort,
  makeTempDir,
  processEnv,
  REPO_ROOT,
  startProcess,
  waitForHttp,
  waitUntil,
  writeNginxConf,
  type ManagedProcess,
} from '../../test/harness/index.ts';

const db = useTestDatabase();
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const DEEP = 10_000;
const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const TOO_DEEP = 'The body nests arrays and objects deeper than 64 levels; no route takes such a body.';

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const clean of cleanups.reverse()) await clean();
});

/** Lines at error level or above: a hostile body is the client's fault, never one of these. */
const errorLines = (p: Pick<ManagedProcess, 'logLines'>) => p.logLines().filter((l) => Number(l.level) >= 50);

async function send(url: string, key: string, method: string, body: string) {
  const res = await fetch(url, { method, headers: { ...bearer(key), 'content-type': 'application/json' }, body });
  return { status: res.status, body: (await res.json()) as { code: string; message: string } };
}

describe('JSON nested thousands of levels deep', () => {
  it('is a 400 invalid_request naming the bound on admin, publish, multipart and presign routes; a chunked body over the bound is 413', async () => {
    await createRepository(db.pool, 'deep');
    const admin = await createServiceAccount(db.pool, {
      scopes: ['read', 'write', 'admin'],
      grants: { deep: 'write' },
    });
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const bodies: Array<[string, string, string]> = [
      [
        'PUT',
        '/api/v1/admin/rate-limits',
        `{"rate_limits":{"gateway_request":[{"name":"a","limit":${nested(DEEP)}}]}}`,
      ],
      // Within the reviver's reach: the message quoted the whole value back before.
      [
        'PUT',
        '/api/v1/admin/rate-limits',
        `{"rate_limits":{"gateway_request":[{"name":"a","limit":${nested(2000)}}]}}`,
      ],
      ['POST', '/api/v1/admin/principals', `{"name":${nested(DEEP)}}`],
      ['POST', '/api/v1/repositories/deep/artifacts/a.bin/uploads', `{"size":${nested(DEEP)}}`],
      ['POST', '/api/v1/repositories/deep/artifacts/a.bin/presign', `{"expiresInSeconds":${nested(DEEP)}}`],
    ];
    for (const [method, route, body] of bodies)
      expect(await send(`${gw.url}${route}`, admin.key, method, body), route).toEqual({
        status: 400,
        body: expect.objectContaining({ code: 'invalid_request', message: TOO_DEEP }),
      });
    // Sent chunked (no Content-Length): refused once it crosses 64 KiB, and answered 413 as documented.
    const res = await fetch(`${gw.url}/api/v1/admin/principals`, {
      method: 'POST',
      headers: { ...bearer(admin.key), 'content-type': 'application/json' },
      body: new Blob([`{"name":"${'x'.repeat(70 * 1024)}"}`]).stream(),
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { code: string }).code).toBe('payload_too_large');
    expect(errorLines(gw)).toEqual([]);
  });

  it("is a 400 invalid_request naming the bound on the rules service's override route", async () => {
    const admin = await createServiceAccount(db.pool, { scopes: ['read', 'admin'] });
    const port = await freeLoopbackPort();
    const service = startProcess(process.execPath, [ARKVORY_BIN, 'rules-service', 'serve'], {
      name: 'rules-service',
      cwd: REPO_ROOT,
      env: processEnv({
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_PORT: String(port),
        ARKVORY_HOST: '127.0.0.1',
        // Every response's line, for the contract check below.
        ARKVORY_LOG_LEVEL: 'debug',
      }),
    });
    cleanups.push(() => service.stop('SIGTERM', 10_000));
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/health/status`, { process: service, timeoutMs: 30_000 });
    const override = `${url}/api/v1/admin/rule-overrides/alpha/gateway_request/principal/${admin.principalId}`;
    expect(await send(override, admin.key, 'PUT', `{"rules":[{"name":"a","limit":${nested(DEEP)}}]}`)).toEqual({
      status: 400,
      body: expect.objectContaining({ code: 'invalid_request', message: TOO_DEEP }),
    });
    const query = await fetch(`${url}/api/v1/rules/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `{"service":"alpha","limiter":"gateway_request","identifier":${nested(DEEP)}}`,
    });
    expect(query.status).toBe(400);
    expect(((await query.json()) as { message: string }).message).toBe(TOO_DEEP);
    expect(errorLines(service)).toEqual([]);
    await service.stop();
    const lines = service.logLines();
    expect(undescribedResponses(await loadOpenApiDocument(RULES_SERVICE_OPENAPI_PATH), lines)).toEqual([]);
  });

  it('as a rules service answer, is counted invalid (not error) and the local rules apply', async () => {
    if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
    const dir = await makeTempDir('arkvory-deep-answer-');
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    // Valid JSON within the 1 MiB bound; ttl_s alone is 10,000 levels deep.
    await writeFile(path.join(dir, 'answer.json'), `{"rules":[],"ttl_s":${nested(DEEP)},"varies_by":[]}`);
    const port = await freeLoopbackPort();
    // The query is a POST: answered through an error page, which nginx serves as a GET of the file.
    const conf = await writeNginxConf(dir, {
      http: `access_log off;
server {
  listen 127.0.0.1:${port};
  location = /api/v1/rules/query { error_page 418 =200 /answer; return 418; }
  location = /answer { internal; default_type application/json; alias ${dir}/answer.json; }
}`,
    });
    const nginx: ChildProcess = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: 'ignore' });
    cleanups.push(async () => {
      if (nginx.exitCode !== null) return;
      const exited = new Promise((r) => nginx.once('exit', r));
      nginx.kill('SIGTERM');
      await exited;
    });
    const answerUrl = `http://127.0.0.1:${port}/api/v1/rules/query`;
    await waitUntil(
      () =>
        fetch(answerUrl, { method: 'POST', body: '{}' }).then(
          (r) => r.text().then(() => r.status === 200),
          () => false,
        ),
      { what: 'nginx to answer', timeoutMs: 10_000 },
    );

    const user = await createServiceAccount(db.pool);
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_RULES_SERVICE_URL: `http://127.0.0.1:${port}`,
        ARKVORY_SERVICE_NAME: 'alpha',
        ARKVORY_RULES_SERVICE_TIMEOUT_MS: '2000',
      },
    });
    const res = await fetch(`${gw.url}/api/v1/repositories`, { headers: bearer(user.key) });
    expect(res.status).toBe(200);
    expect(res.headers.get('ratelimit-policy')).toBe('"limit_requests_by_principal";q=12000;w=60');
    await res.arrayBuffer();
    const counted = async (result: string) =>
      (await (await fetch(`${gw.url}/metrics`)).text())
        .split('\n')
        .filter(
          (l) => l.startsWith('arkvory_rate_limit_rules_service_requests_total{') && l.includes(`result="${result}"`),
        )
        .reduce((n, l) => n + Number(l.split(' ').pop()), 0);
    // Each limiter the request checked asked once (the circuit opens after three): none counted as error.
    expect(await counted('invalid')).toBeGreaterThanOrEqual(1);
    expect(await counted('error')).toBe(0);
    let warning: Record<string, unknown> | undefined;
    await waitUntil(
      () =>
        (warning = gw
          .logLines()
          .find((l) => l.msg === 'rules service answer unusable; local rate-limit rules apply')) !== undefined,
      { what: 'the unusable-answer line', timeoutMs: 5_000 },
    );
    expect(warning).toMatchObject({ result: 'invalid', code: 'rules_service_invalid' });
    expect(JSON.stringify(warning!.err)).toContain('nests arrays and objects deeper than 64 levels');
    expect(errorLines(gw)).toEqual([]);
  });
});
