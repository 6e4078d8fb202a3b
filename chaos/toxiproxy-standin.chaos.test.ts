/**
 * Pins the toxiproxy behaviours the chaos suite relies on, driven through toxiproxy-node-client
 * against whichever server chaos/support/toxiproxy.ts provides (the stand-in here; a real
 * toxiproxy-server with TOXIPROXY_URL or on PATH). Every toxic is measured on a real TCP echo
 * server; time bounds are generous but each fails if the toxic does nothing.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Proxy } from 'toxiproxy-node-client';
import { startToxiproxy, type ProxiedUpstream, type ToxiproxyServer } from './support/toxiproxy.ts';
import { connectTcp, startTcpServer, type TcpClient, type TcpServer } from './support/tcp-peers.ts';
import { waitUntil } from './support/wait.ts';

interface ProxyDetails {
  name: string;
  listen: string;
  upstream: string;
  enabled: boolean;
  toxics: Array<{ name: string; type: string; stream: string; toxicity: number; attributes: Record<string, number> }>;
}

/** Timer slack: a timer may fire a hair early and the loopback adds a little. */
const EARLY_MS = 15;

let toxiproxy: ToxiproxyServer;
let echo: TcpServer;
let goodbye: TcpServer;
const clients: TcpClient[] = [];

beforeAll(async () => {
  toxiproxy = await startToxiproxy();
  echo = await startTcpServer('echo');
  goodbye = await startTcpServer('goodbye');
});

afterEach(() => {
  for (const client of clients.splice(0)) client.close();
});

afterAll(async () => {
  await toxiproxy?.stop();
  await echo?.close();
  await goodbye?.close();
});

async function connect(target: ProxiedUpstream): Promise<TcpClient> {
  const client = await connectTcp(target.host, target.port);
  clients.push(client);
  return client;
}

function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(4).toString('hex')}`;
}

async function details(proxy: Proxy): Promise<ProxyDetails> {
  return (await toxiproxy.client.getApi().get<ProxyDetails>(`${toxiproxy.url}/proxies/${proxy.name}`)).data;
}

async function setEnabled(target: ProxiedUpstream, enabled: boolean): Promise<Proxy> {
  const { listen, upstream } = target.proxy;
  return target.proxy.update({ enabled, listen, upstream });
}

describe(`toxiproxy server (${process.env.TOXIPROXY_URL ? 'TOXIPROXY_URL' : 'started by the suite'})`, () => {
  describe('proxies and toxics through toxiproxy-node-client', () => {
    it('creates, lists, shows, updates and deletes a proxy, with 404 and 409 where the real server gives them', async () => {
      const name = uniqueName('crud');
      const target = await toxiproxy.proxyTo(echo.address, { name });
      expect(target.proxy.toJson()).toEqual({ name, listen: expect.stringMatching(/^127\.0\.0\.1:\d+$/), upstream: echo.address, enabled: true });
      expect(target.port).toBeGreaterThan(0);

      await expect(toxiproxy.client.createProxy({ name, listen: '127.0.0.1:0', upstream: echo.address })).rejects.toThrow('status code 409');
      await expect(toxiproxy.client.createProxy({ name: uniqueName('noupstream'), listen: '127.0.0.1:0', upstream: '' })).rejects.toThrow('status code 400');
      await expect(toxiproxy.client.createProxy({ name: '', listen: '127.0.0.1:0', upstream: echo.address })).rejects.toThrow('status code 400');

      const all = await toxiproxy.client.getAll();
      expect(all[name]?.toJson()).toEqual(target.proxy.toJson());
      expect((await toxiproxy.client.get(name)).toJson()).toEqual(target.proxy.toJson());
      expect(await details(target.proxy)).toEqual({ ...target.proxy.toJson(), toxics: [] });
      await expect(toxiproxy.client.get(uniqueName('missing'))).rejects.toThrow('status code 404');

      const disabled = await setEnabled(target, false);
      expect(disabled.toJson()).toEqual({ ...target.proxy.toJson(), enabled: false });
      expect((await toxiproxy.client.get(name)).enabled).toBe(false);
      const enabled = await setEnabled(target, true);
      expect(enabled.toJson()).toEqual(target.proxy.toJson());

      await target.proxy.remove();
      await expect(toxiproxy.client.get(name)).rejects.toThrow('status code 404');
      await expect(target.proxy.remove()).rejects.toThrow('status code 404');
      await expect(connectTcp(target.host, target.port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    });

    it('adds, shows, updates and removes toxics with the real JSON shapes and errors', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      const latency = await target.proxy.addToxic({ name: 'slow', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 100, jitter: 10 } });
      expect(latency.toJson()).toEqual({ name: 'slow', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 100, jitter: 10 } });
      // Name and stream default to "<type>_<stream>" and downstream; missing attributes are 0.
      const unnamed = await target.proxy.addToxic({ type: 'bandwidth', toxicity: 0.5, attributes: {} } as never);
      expect(unnamed.toJson()).toEqual({ name: 'bandwidth_downstream', type: 'bandwidth', stream: 'downstream', toxicity: 0.5, attributes: { rate: 0 } });
      const upstream = await target.proxy.addToxic({ name: 'cut', type: 'limit_data', stream: 'upstream', toxicity: 1, attributes: { bytes: 5 } });

      expect((await target.proxy.getToxic('slow')).toJson()).toEqual(latency.toJson());
      // Upstream toxics are listed first, then downstream, each in the order added.
      expect((await details(target.proxy)).toxics.map((t) => t.name)).toEqual(['cut', 'slow', 'bandwidth_downstream']);

      const updated = await latency.update({ ...latency.toJson(), attributes: { latency: 250, jitter: 0 }, toxicity: 0.25 });
      expect(updated.toJson()).toEqual({ name: 'slow', type: 'latency', stream: 'downstream', toxicity: 0.25, attributes: { latency: 250, jitter: 0 } });
      expect((await target.proxy.getToxic('slow')).toJson()).toEqual(updated.toJson());

      await expect(target.proxy.addToxic({ name: 'slow', type: 'timeout', stream: 'upstream', toxicity: 1, attributes: { timeout: 1 } })).rejects.toThrow('status code 409');
      await expect(target.proxy.addToxic({ name: 'bad-type', type: 'nonsense' as never, stream: 'upstream', toxicity: 1, attributes: {} })).rejects.toThrow('status code 400');
      await expect(target.proxy.addToxic({ name: 'bad-stream', type: 'latency', stream: 'sideways' as never, toxicity: 1, attributes: {} })).rejects.toThrow('status code 400');
      await expect(target.proxy.addToxic({ name: 'bad-attr', type: 'latency', stream: 'upstream', toxicity: 1, attributes: { latency: 'soon' } })).rejects.toThrow('status code 400');
      await expect(target.proxy.getToxic('nope')).rejects.toThrow('status code 404');

      await upstream.remove();
      await expect(upstream.remove()).rejects.toThrow('status code 404');
      expect((await details(target.proxy)).toxics.map((t) => t.name)).toEqual(['slow', 'bandwidth_downstream']);
    });

    it('answers with the status codes and error bodies the client hides (201, 200, 204, JSON errors)', async () => {
      // The only raw HTTP in this file: toxiproxy-node-client does not expose success statuses.
      const name = uniqueName('wire');
      const created = await fetch(`${toxiproxy.url}/proxies`, { method: 'POST', body: JSON.stringify({ name, listen: '127.0.0.1:0', upstream: echo.address }) });
      expect(created.status).toBe(201);
      expect(created.headers.get('content-type')).toMatch(/^application\/json/);
      expect(await created.json()).toMatchObject({ name, enabled: true, toxics: [] });
      const toxic = await fetch(`${toxiproxy.url}/proxies/${name}/toxics`, { method: 'POST', body: JSON.stringify({ type: 'latency', attributes: { latency: 1 } }) });
      expect(toxic.status).toBe(200);
      expect(await toxic.json()).toEqual({ name: 'latency_downstream', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 1, jitter: 0 } });
      const patched = await fetch(`${toxiproxy.url}/proxies/${name}/toxics/latency_downstream`, { method: 'PATCH', body: JSON.stringify({ attributes: { jitter: 2 } }) });
      expect(patched.status).toBe(200);
      expect(await patched.json()).toMatchObject({ attributes: { latency: 1, jitter: 2 }, toxicity: 1 });
      const removedToxic = await fetch(`${toxiproxy.url}/proxies/${name}/toxics/latency_downstream`, { method: 'DELETE' });
      expect([removedToxic.status, await removedToxic.text()]).toEqual([204, '']);
      const removed = await fetch(`${toxiproxy.url}/proxies/${name}`, { method: 'DELETE' });
      expect([removed.status, await removed.text()]).toEqual([204, '']);
      const missing = await fetch(`${toxiproxy.url}/proxies/${name}`);
      expect(missing.status).toBe(404);
      expect(JSON.parse(await missing.text())).toEqual({ error: 'proxy not found', status: 404 });
      const badBody = await fetch(`${toxiproxy.url}/proxies`, { method: 'POST', body: '{not json' });
      expect(badBody.status).toBe(400);
      expect(JSON.parse(await badBody.text())).toMatchObject({ error: expect.stringMatching(/^bad request body/), status: 400 });
    });
  });

  describe('the TCP proxy', () => {
    it('streams several megabytes both ways unchanged', async () => {
      const client = await connect(await toxiproxy.proxyTo(echo.address));
      const payload = randomBytes(8 * 1024 * 1024);
      await client.roundTripMs(payload, payload.length, 20_000);
      expect(client.received().equals(payload)).toBe(true);
    });

    it('enabled=false cuts open connections and refuses new ones; enabling again serves', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      const open = await connect(target);
      await open.roundTripMs('before');
      await setEnabled(target, false);
      const ending = await open.endedWithin(3000);
      expect(ending.atMs).toBeGreaterThan(0);
      expect(open.received().toString()).toBe('before');
      await expect(connectTcp(target.host, target.port)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
      await setEnabled(target, true);
      const again = await connect(target);
      expect(await again.roundTripMs('after')).toBeLessThan(1000);
    });

    it('updating the upstream sends new connections to the new upstream', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      expect(await (await connect(target)).roundTripMs('echoed')).toBeLessThan(1000);
      const moved = await target.proxy.update({ enabled: true, listen: target.proxy.listen, upstream: goodbye.address });
      expect(moved.toJson()).toEqual({ ...target.proxy.toJson(), upstream: goodbye.address });
      const client = await connect(target);
      await client.endedWithin(3000);
      expect(client.received().toString()).toBe('bye');
    });

    it('an unreachable upstream: the client is accepted, then closed without data', async () => {
      const gone = await startTcpServer('echo');
      await gone.close();
      const target = await toxiproxy.proxyTo(gone.address);
      const client = await connect(target);
      await client.endedWithin(3000);
      expect(client.receivedBytes()).toBe(0);
    });

    it('refuses to create a proxy on a listen address that is taken (500)', async () => {
      const taken = await toxiproxy.proxyTo(echo.address);
      await expect(toxiproxy.client.createProxy({ name: uniqueName('clash'), listen: taken.proxy.listen, upstream: echo.address })).rejects.toThrow('status code 500');
    });

    it('POST /reset removes every toxic and re-enables disabled proxies', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'slow', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 600, jitter: 0 } });
      await target.proxy.addToxic({ name: 'cut', type: 'limit_data', stream: 'upstream', toxicity: 1, attributes: { bytes: 1 } });
      await setEnabled(target, false);
      await toxiproxy.client.reset();
      expect(await details(target.proxy)).toMatchObject({ enabled: true, toxics: [] });
      const client = await connect(target);
      expect(await client.roundTripMs('reset')).toBeLessThan(400);
    });
  });

  describe('toxics, measured on a real echo server', () => {
    it('latency delays each direction by at least its latency, on open and new connections', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      const open = await connect(target);
      const baselineMs = await open.roundTripMs('x');
      await target.proxy.addToxic({ name: 'down', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 300, jitter: 0 } });
      const downMs = await open.roundTripMs('y');
      expect(downMs).toBeGreaterThanOrEqual(300 - EARLY_MS);
      expect(downMs).toBeLessThan(300 + 2000);
      expect(baselineMs).toBeLessThan(downMs);

      await target.proxy.addToxic({ name: 'up', type: 'latency', stream: 'upstream', toxicity: 1, attributes: { latency: 200, jitter: 0 } });
      const fresh = await connect(target);
      const bothMs = await fresh.roundTripMs('z');
      expect(bothMs).toBeGreaterThanOrEqual(500 - EARLY_MS);
      expect(bothMs).toBeLessThan(500 + 2000);
    });

    it('latency is per chunk, not cumulative: back-to-back messages arrive a latency later, not n latencies', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'down', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 300, jitter: 0 } });
      const client = await connect(target);
      const startedMs = performance.now();
      for (let i = 0; i < 5; i++) {
        client.socket.write(`m${i}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await waitUntil(() => client.receivedBytes() >= 10, { timeoutMs: 5000, what: 'five echoes' });
      const elapsedMs = performance.now() - startedMs;
      expect(elapsedMs).toBeGreaterThanOrEqual(300 + 80 - EARLY_MS);
      expect(elapsedMs).toBeLessThan(5 * 300);
      expect(client.received().toString()).toBe('m0m1m2m3m4');
    });

    it('jitter spreads the delay over latency ± jitter', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'jittery', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 300, jitter: 250 } });
      const connections = await Promise.all(Array.from({ length: 32 }, () => connect(target)));
      const delays = await Promise.all(connections.map((c) => c.roundTripMs('j')));
      // Each delay lies in [50, 550) ms. Without jitter they would all sit near 300 ms (plus the
      // same scheduling lag); with it, 32 samples spread over more than 200 ms (a miss has odds of
      // about 1e-6). The spread, not absolute values, survives a loaded machine's lag.
      expect(Math.min(...delays)).toBeGreaterThanOrEqual(50 - EARLY_MS);
      expect(Math.max(...delays) - Math.min(...delays)).toBeGreaterThan(200);
    });

    it('bandwidth caps the rate (rate is KB/s of 1000 bytes)', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'narrow', type: 'bandwidth', stream: 'downstream', toxicity: 1, attributes: { rate: 500 } });
      const client = await connect(target);
      const payload = randomBytes(750_000);
      const elapsedMs = await client.roundTripMs(payload, payload.length, 15_000);
      const bytesPerSecond = payload.length / (elapsedMs / 1000);
      expect(bytesPerSecond).toBeLessThan(500_000 * 1.25);
      expect(bytesPerSecond).toBeGreaterThan(500_000 / 4);
      expect(client.received().equals(payload)).toBe(true);
    });

    it('timeout stops the data and closes the connection after its timeout', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'blackhole', type: 'timeout', stream: 'downstream', toxicity: 1, attributes: { timeout: 500 } });
      const client = await connect(target);
      client.socket.write('ping');
      const ending = await client.endedWithin(5000);
      expect(client.receivedBytes()).toBe(0);
      expect(ending.atMs).toBeGreaterThanOrEqual(500 - EARLY_MS);
      expect(ending.atMs).toBeLessThan(500 + 3000);
    });

    it('timeout 0 drops the data and never closes, until removing the toxic closes the connection', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      const blackhole = await target.proxy.addToxic({ name: 'blackhole', type: 'timeout', stream: 'upstream', toxicity: 1, attributes: { timeout: 0 } });
      const client = await connect(target);
      client.socket.write('dropped');
      await new Promise((resolve) => setTimeout(resolve, 400));
      expect([client.receivedBytes(), client.isEnded()]).toEqual([0, false]);
      await blackhole.remove();
      await client.endedWithin(3000);
      expect(client.receivedBytes()).toBe(0);
    });

    it('reset_peer resets the connection (ECONNRESET) once data flows, after its timeout', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'rst', type: 'reset_peer', stream: 'upstream', toxicity: 1, attributes: { timeout: 300 } });
      const client = await connect(target);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(client.isEnded()).toBe(false);
      const sentAtMs = performance.now() - client.connectedAtMs;
      client.socket.write('trigger');
      const ending = await client.endedWithin(5000);
      expect(ending.errorCode).toBe('ECONNRESET');
      expect(ending.atMs - sentAtMs).toBeGreaterThanOrEqual(300 - EARLY_MS);
      expect(ending.atMs - sentAtMs).toBeLessThan(300 + 3000);
      expect(client.receivedBytes()).toBe(0);
    });

    it('slow_close lets data through but delays the close', async () => {
      const target = await toxiproxy.proxyTo(goodbye.address);
      await target.proxy.addToxic({ name: 'lingering', type: 'slow_close', stream: 'downstream', toxicity: 1, attributes: { delay: 1500 } });
      const client = await connect(target);
      await waitUntil(() => client.receivedBytes() >= 3, { timeoutMs: 2000, what: '"bye"' });
      const byeAtMs = performance.now() - client.connectedAtMs;
      expect(byeAtMs).toBeLessThan(1000);
      const ending = await client.endedWithin(6000);
      expect(client.received().toString()).toBe('bye');
      expect(ending.atMs).toBeGreaterThanOrEqual(1500 - EARLY_MS);
      expect(ending.atMs).toBeLessThan(1500 + 3000);
    });

    it('limit_data passes exactly its bytes, then closes the connection', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      await target.proxy.addToxic({ name: 'cap', type: 'limit_data', stream: 'downstream', toxicity: 1, attributes: { bytes: 1000 } });
      const client = await connect(target);
      const payload = randomBytes(5000);
      client.socket.write(payload);
      await client.endedWithin(3000);
      expect(client.received().equals(payload.subarray(0, 1000))).toBe(true);
    });

    it('toxicity 0 never applies the toxic; raising it to 1 does', async () => {
      const target = await toxiproxy.proxyTo(echo.address);
      const toxic = await target.proxy.addToxic({ name: 'never', type: 'latency', stream: 'downstream', toxicity: 0, attributes: { latency: 2000, jitter: 0 } });
      const connections = await Promise.all(Array.from({ length: 8 }, () => connect(target)));
      const delays = await Promise.all(connections.map((c) => c.roundTripMs('t')));
      expect(Math.max(...delays)).toBeLessThan(1500);
      await toxic.update({ ...toxic.toJson(), toxicity: 1, attributes: { latency: 600, jitter: 0 } });
      const hit = await connect(target);
      expect(await hit.roundTripMs('t')).toBeGreaterThanOrEqual(600 - EARLY_MS);
    });
  });
});
