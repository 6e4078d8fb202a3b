import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway } from '../../test/support/gateway.ts';

describe('arkvory serve', () => {
  const db = useTestDatabase();

  it('serves health routes and answers unknown routes with a JSON 404', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const live = await fetch(`${gw.url}/health/live`);
    expect(live.status).toBe(200);
    expect(await live.json()).toEqual({ status: 'live' });
    const status = await fetch(`${gw.url}/health/status`);
    expect(status.status).toBe(200);
    expect(status.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    const missing = await fetch(`${gw.url}/no/such/route`);
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await missing.json()).toEqual({ code: 'not_found', message: expect.any(String) });
    const wrongMethod = await fetch(`${gw.url}/health/live`, { method: 'DELETE' });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('GET, HEAD');
    expect(await gw.stop('SIGTERM')).toBe(0);
    const requestLines = gw.logLines().filter((l) => l.msg === 'request');
    expect(requestLines.find((l) => l.route === '/health/live')).toMatchObject({
      method: 'GET',
      status: 200,
      completed: true,
    });
  });

  it('answers a malformed request line with 400 and stays healthy', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
    const net = await import('node:net');
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(gw.port, '127.0.0.1', () => socket.write('GARBAGE \0\0 HTTP/9\r\n\r\n'));
      let text = '';
      socket.on('data', (d) => (text += d.toString()));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });
    expect(reply).toMatch(/^HTTP\/1\.1 400/);
    // Like every response (the contract), with a request id of its own.
    expect(reply).toMatch(/\r\nx-request-id: [0-9a-f-]{36}\r\n/);
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
  });

  it.each([
    [{ ARKVORY_PORT: 'abc' }, 'ARKVORY_PORT'],
    [{ ARKVORY_ROLE: 'boss' }, 'ARKVORY_ROLE'],
    [{ ARKVORY_DATABASE_POOL_SIZE: '0' }, 'ARKVORY_DATABASE_POOL_SIZE'],
    // Strict-Transport-Security without TLS, and one without max-age (checked before the files are read).
    [{ ARKVORY_TLS_HSTS: 'max-age=600' }, 'ARKVORY_TLS_HSTS'],
    [
      {
        ARKVORY_TLS_CERT_FILE: '/nonexistent.crt',
        ARKVORY_TLS_KEY_FILE: '/nonexistent.key',
        ARKVORY_TLS_HSTS: 'preload',
      },
      'ARKVORY_TLS_HSTS: max-age is required',
    ],
  ])('exits 2 on %j with one line naming the variable', async (env, name) => {
    const result = await runCli(['serve'], env);
    expect(result.code).toBe(2);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(name);
  });

  it("exits 2 when the metrics token file holds an example's placeholder, naming the variable, never the value", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'arkvory-placeholder-'));
    try {
      // What a Kubernetes Secret copied from an example, or a credential written from one, hands over.
      const file = path.join(dir, 'metrics-token');
      await writeFile(file, 'change-me-metrics-token\n', { mode: 0o600 });
      const gw = await startGateway({
        env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_METRICS_TOKEN_FILE: file },
        waitFor: 'none',
      });
      // A configuration refusal comes before any connection; the bound only keeps a gateway that
      // took the token from serving until the test times out.
      expect(await Promise.race([gw.exited, sleep(30_000).then(() => 'still running')])).toBe(2);
      expect(gw.logs()).toContain("ARKVORY_METRICS_TOKEN: an example's placeholder");
      expect(gw.logs()).not.toContain('change-me-metrics-token');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses to start on a schema that is behind and says to run npm run migrate', async () => {
    const { createTestDatabase } = await import('../../test/support/database.ts');
    const empty = await createTestDatabase({ migrated: false });
    try {
      const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: empty.url }, waitFor: 'none' });
      expect(await gw.exited).toBe(1);
      expect(gw.logs()).toContain('npm run migrate');
    } finally {
      await empty.drop();
    }
  });

  it('exits 0 on SIGTERM with a keep-alive client connected', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_SHUTDOWN_TIMEOUT_SECONDS: '5' } });
    // A keep-alive connection opened before the signal can still ask for the status while draining.
    const { Agent, request } = await import('undici');
    const agent = new Agent({ keepAliveTimeout: 10_000, connections: 1 });
    const first = await request(`${gw.url}/health/status`, { dispatcher: agent });
    expect(first.statusCode).toBe(200);
    await first.body.text();
    gw.child.kill('SIGTERM');
    expect(await gw.exited).toBe(0);
    await agent.close();
    expect(gw.logs()).toContain('"msg":"shutting down"');
  });

  it('with ARKVORY_WORKERS=auto and a database, serves from one worker per core', async () => {
    const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: 'auto' } });
    const status = (await (await fetch(`${gw.url}/health/status`)).json()) as { workers: unknown[] };
    expect(status.workers).toHaveLength(availableParallelism());
    expect(await gw.stop('SIGTERM')).toBe(0);
  });

  it('runs on the embedded defaults: no database configured, SIGINT exits 0 and leaves no postgres behind', async () => {
    // Even with `auto`: the embedded PostgreSQL is one process's, so the gateway is one.
    const gw = await startGateway({ env: { ARKVORY_WORKERS: 'auto' }, timeoutMs: 60_000 });
    expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
    const status = (await (await fetch(`${gw.url}/health/status`)).json()) as { workers: unknown[] };
    expect(status.workers).toHaveLength(1);
    const pidFile = path.join(gw.dataDir, '.pg', 'postmaster.pid');
    const pgPid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
    expect(pgPid).toBeGreaterThan(0);
    expect(await gw.stop('SIGINT')).toBe(0);
    let alive = true;
    for (let i = 0; i < 50 && alive; i++) {
      try {
        process.kill(pgPid, 0);
        await sleep(100);
      } catch {
        alive = false;
      }
    }
    expect(alive).toBe(false);
  });

  it('starts again on the embedded defaults when postmaster.pid names a process that is not the cluster, and leaves it alone', async () => {
    const first = await startGateway({ timeoutMs: 60_000 });
    expect(await first.stop('SIGTERM')).toBe(0);
    // A postmaster.pid left by a server that did not stop (a power cut), whose id the system has
    // since given to another program: one of this user's, whose parent is alive.
    const bystander = spawn('sleep', ['120'], { stdio: 'ignore' });
    const exited = new Promise((resolve) => bystander.once('exit', (code, signal) => resolve(signal ?? code)));
    try {
      const pidFile = path.join(first.dataDir, '.pg', 'postmaster.pid');
      const pgDir = path.join(first.dataDir, '.pg');
      await writeFile(
        pidFile,
        [bystander.pid, pgDir, Math.floor(Date.now() / 1000), 1, '', '127.0.0.1', '', 'ready', ''].join('\n'),
      );
      // Fails with the gateway's log if it exits instead of serving.
      const again = await startGateway({ dataDir: first.dataDir, timeoutMs: 60_000 });
      expect((await fetch(`${again.url}/health/status`)).status).toBe(200);
      expect(bystander.exitCode, 'the other program was not signalled').toBeNull();
      expect(bystander.signalCode).toBeNull();
      expect(await again.stop('SIGTERM')).toBe(0);
    } finally {
      bystander.kill('SIGKILL');
      await exited;
    }
  });
});
