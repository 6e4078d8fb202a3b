/**
 * The console on a writer of two worker processes (ARKVORY_WORKERS=2): its sessions are the
 * instance's (proxy/workers/remote-sessions.ts), so a browser signed in over one connection is
 * signed in on every connection, whichever worker the kernel gives it, and a sign-out over one
 * connection ends the session on both workers. Each request goes over a new connection whose
 * worker is read from `/health/status` on that same connection first.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from 'undici';
import { bearer, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { statusOver } from '../../test/support/worker-instance.ts';

const db = useTestDatabase();
let gw: GatewayProcess;
let adminKey: string;
const clients: Client[] = [];

beforeAll(async () => {
  ({ key: adminKey } = await createServiceAccount(db.pool, { name: 'console-admin', scopes: ['admin'] }));
  gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_WORKERS: '2' } });
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.destroy()));
});

afterAll(async () => {
  await gw?.stop('SIGTERM');
});

interface Answer {
  worker: number;
  status: number;
  setCookie: string | undefined;
  body: string;
}

/**
 * One request on a new connection, with the index of the worker that holds that connection; with
 * `worker`, new connections are opened until one is that worker's (at most 40).
 */
async function onNewConnection(
  method: string,
  path: string,
  headers: Record<string, string> = {},
  worker?: number,
): Promise<Answer> {
  for (let i = 0; ; i++) {
    const client = new Client(gw.url, { pipelining: 1 });
    clients.push(client);
    const { workerIndex } = await statusOver(client);
    if (worker !== undefined && workerIndex !== worker) {
      await client.close();
      if (i < 40) continue;
      throw new Error(`no connection reached worker ${worker} in 40 tries`);
    }
    const res = await client.request({ path, method, headers });
    const body = await res.body.text();
    await client.close();
    const setCookie = res.headers['set-cookie'];
    return {
      worker: workerIndex,
      status: res.statusCode,
      setCookie: Array.isArray(setCookie) ? setCookie[0] : setCookie,
      body,
    };
  }
}

/** Requests on new connections until each worker answered `perWorker` of them (at most 80 in all). */
async function onBothWorkers(
  method: string,
  path: string,
  headers: Record<string, string>,
  perWorker = 4,
): Promise<Answer[]> {
  const answers: Answer[] = [];
  const count = (w: number) => answers.filter((a) => a.worker === w).length;
  for (let i = 0; i < 80 && (count(0) < perWorker || count(1) < perWorker); i++)
    answers.push(await onNewConnection(method, path, headers));
  expect([count(0) >= perWorker, count(1) >= perWorker]).toEqual([true, true]);
  return answers;
}

describe('console sessions with two workers', () => {
  it('a session opened on one worker is good on every connection to both, and a sign-out on one ends it on both', async () => {
    const signIn = await onNewConnection('POST', '/console/session', bearer(adminKey));
    expect(signIn.status).toBe(201);
    const { csrfToken } = JSON.parse(signIn.body) as { csrfToken: string };
    const cookie = signIn.setCookie?.split(';')[0] ?? '';
    expect(cookie).toMatch(/^arkvory_console=[A-Za-z0-9_-]{43}$/);

    // Every connection, on either worker, is signed in with the one session.
    const api = await onBothWorkers('GET', '/console/api/status', { cookie });
    expect(api.filter((a) => a.status !== 200).map((a) => `worker ${a.worker}: ${a.status} ${a.body}`)).toEqual([]);
    const resumed = await onBothWorkers('GET', '/console/session', { cookie }, 2);
    for (const a of resumed) expect(JSON.parse(a.body)).toMatchObject({ signedIn: true, csrfToken });
    // The CSRF token is the session's on both workers: a change without it is refused on either.
    const unchecked = await onBothWorkers('DELETE', '/console/api/session', { cookie }, 1);
    expect(unchecked.map((a) => a.status)).toEqual(unchecked.map(() => 403));

    // Sign out over a connection of the worker that did not open the session.
    const out = await onNewConnection(
      'DELETE',
      '/console/api/session',
      { cookie, 'x-csrf-token': csrfToken },
      1 - signIn.worker,
    );
    expect(out.status).toBe(204);

    const after = await onBothWorkers('GET', '/console/api/status', { cookie });
    expect(after.map((a) => a.status)).toEqual(after.map(() => 401));
    const gone = await onBothWorkers('GET', '/console/session', { cookie }, 2);
    for (const a of gone) expect(JSON.parse(a.body)).toEqual({ signedIn: false });
  });
});
