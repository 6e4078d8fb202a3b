/**
 * The common starting point of the multi-host scenarios: the topology, a writer (slot 0) and two
 * readers (slots 1, 2) on their own hosts, the router in front, a repository with one file
 * uploaded through the writer, and keys. The client host downloads with the real curl.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { createRepository, createServiceAccount, waitUntil } from '../harness/index.ts';
export { sha256 } from '../support/content.ts';
import type { HostProcess } from './host-process.ts';
import { buildTopology, GATEWAY_PORT, tempDir, type Gateway, type SharedPolicy, type Topology } from './topology.ts';

export const MiB = 1024 * 1024;

export interface Deployment {
  readonly topology: Topology;
  readonly writer: Gateway;
  readonly readers: [Gateway, Gateway];
  readonly router: Gateway;
  readonly routerUrl: string;
  readonly readKey: string;
  readonly writeKey: string;
  readonly principalId: string;
  readonly file: Buffer;
  readonly contentPath: string;
  /** A directory on this machine for the client's downloads (the client host shares the filesystem). */
  readonly downloads: string;
  stop(): Promise<void>;
}

/** The router's own view: how many gateways are in its pool and healthy. */
export async function routerHealthy(routerUrl: string): Promise<{ total: number; healthy: number; writer: boolean }> {
  const res = await fetch(`${routerUrl}/health/status`, { signal: AbortSignal.timeout(2000) });
  const body = (await res.json()) as { backends: { total: number; healthy: number }; writer: boolean };
  return { ...body.backends, writer: body.writer };
}

export async function startDeployment(options: {
  policy: SharedPolicy;
  fileBytes: number;
  probeIntervalMs?: number;
  gatewayEnv?: Record<string, string>;
  /** Runs once the hosts are up, before the writer starts; returns variables for the writer only. */
  beforeWriter?: (topology: Topology) => Promise<Record<string, string>>;
}): Promise<Deployment> {
  const topology = await buildTopology({
    policy: options.policy,
    ...(options.gatewayEnv ? { env: options.gatewayEnv } : {}),
  });
  const downloads = tempDir('client');
  try {
    await createRepository(topology.pool, 'shared');
    const read = await createServiceAccount(topology.pool, { scopes: ['read'], grants: { shared: 'read' } });
    const write = await createServiceAccount(topology.pool, { scopes: ['read', 'write'], grants: { shared: 'write' } });
    const writerEnv = options.beforeWriter ? await options.beforeWriter(topology) : {};
    const writer = await topology.startGateway('writer', { role: 'api', slot: 0, env: writerEnv });
    const file = randomBytes(options.fileBytes);
    const put = await fetch(`${writer.url}/api/v1/repositories/shared/artifacts/big.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${write.key}`, 'content-type': 'application/octet-stream' },
      body: file,
    });
    if (put.status !== 201) throw new Error(`upload through the writer answered ${put.status}: ${await put.text()}`);
    const readers = (await Promise.all([
      topology.startGateway('reader1', { role: 'reader', slot: 1 }),
      topology.startGateway('reader2', { role: 'reader', slot: 2 }),
    ])) as [Gateway, Gateway];
    const router = await topology.startRouter({ probeIntervalMs: options.probeIntervalMs ?? 1000 });
    const routerUrl = `http://${topology.hosts.router.address}:${GATEWAY_PORT}`;
    await waitUntil(async () => (await routerHealthy(routerUrl)).healthy === 3, {
      what: 'the router to see the writer and both readers healthy',
      timeoutMs: 20_000,
      intervalMs: 100,
      retryOnError: true,
    });
    return {
      topology,
      writer,
      readers,
      router,
      routerUrl,
      readKey: read.key,
      writeKey: write.key,
      principalId: read.principalId,
      file,
      contentPath: '/api/v1/repositories/shared/artifacts/big.bin/content',
      downloads,
      async stop() {
        rmSync(downloads, { recursive: true, force: true });
        await topology.stop();
      },
    };
  } catch (err) {
    rmSync(downloads, { recursive: true, force: true });
    await topology.stop().catch(() => {});
    throw err;
  }
}

/** curl on the client host; `-D` keeps the response headers (the router's x-request-id). */
export async function curlOnClient(
  d: Deployment,
  args: readonly string[],
  timeoutMs = 60_000,
): Promise<{ code: number | null; stderr: string }> {
  const res = await d.topology.run(
    'client',
    'curl',
    ['-sS', '-H', `Authorization: Bearer ${d.readKey}`, ...args],
    timeoutMs,
  );
  return { code: res.code, stderr: res.stderr };
}

/**
 * Starts curl on the client host downloading the deployment's artifact through the router into
 * `downloads/<id>`, tagged `X-Request-Id: <id>` (so the router's log line can be found).
 */
export function downloadOnClient(d: Deployment, id: string, curlOptions: readonly string[] = ['--fail']) {
  return d.topology.spawn('client', `curl ${id}`, 'curl', [
    '-sS',
    ...curlOptions,
    '-H',
    `Authorization: Bearer ${d.readKey}`,
    '-H',
    `X-Request-Id: ${id}`,
    '-o',
    path.join(d.downloads, id),
    `${d.routerUrl}${d.contentPath}`,
  ]);
}

/** Starts one download per id (see downloadOnClient) and waits until every one has received bytes. */
export async function startDownloads(d: Deployment, ids: readonly string[]): Promise<HostProcess[]> {
  const curls = ids.map((id) => downloadOnClient(d, id));
  await waitUntil(() => ids.every((id) => downloadedSize(d, id) > 0), {
    what: `all ${ids.length} downloads to receive bytes`,
    timeoutMs: 10_000,
    intervalMs: 50,
  });
  return curls;
}

/**
 * Three downloads in flight at once (`<prefix>-a`, `-b`, `-c`, see startDownloads): the router's
 * least-active choice puts one on each gateway.
 */
export async function startOnePerGateway(
  d: Deployment,
  prefix: string,
): Promise<{ ids: string[]; curls: HostProcess[] }> {
  const ids = ['a', 'b', 'c'].map((x) => `${prefix}-${x}`);
  return { ids, curls: await startDownloads(d, ids) };
}

/**
 * Resumes `downloads/<name>` on the client host with Range (`curl -C -`) through the router, tagged
 * `X-Request-Id: <requestId>`; `curlOptions` (retries, say) go before the URL.
 */
export function resumeThroughRouter(
  d: Deployment,
  name: string,
  requestId: string,
  options: { curlOptions?: readonly string[]; timeoutMs?: number } = {},
): Promise<{ code: number | null; stderr: string }> {
  return curlOnClient(
    d,
    [
      '--fail',
      '-C',
      '-',
      ...(options.curlOptions ?? []),
      '-H',
      `X-Request-Id: ${requestId}`,
      '-o',
      path.join(d.downloads, name),
      `${d.routerUrl}${d.contentPath}`,
    ],
    options.timeoutMs,
  );
}

/**
 * One `curl --fail` on the client host through the router into `downloads/<id>`, tagged
 * `X-Request-Id: <id>`; `args` (a Range, say) go before the URL, `urlPath` is the artifact's content
 * unless given.
 */
export function fetchOnClient(
  d: Deployment,
  id: string,
  args: readonly string[] = [],
  urlPath = d.contentPath,
): Promise<{ code: number | null; stderr: string }> {
  return curlOnClient(d, [
    '--fail',
    ...args,
    '-H',
    `X-Request-Id: ${id}`,
    '-o',
    path.join(d.downloads, id),
    `${d.routerUrl}${urlPath}`,
  ]);
}

/** Bytes of `downloads/<name>` so far (0 before curl created it). */
export function downloadedSize(d: Deployment, name: string): number {
  try {
    return statSync(path.join(d.downloads, name)).size;
  } catch {
    return 0;
  }
}

export function readDownload(d: Deployment, name: string): Buffer {
  return readFileSync(path.join(d.downloads, name));
}

/**
 * The router's `request` log line for a request id the client sent (`X-Request-Id`, the line's
 * `clientReqId`): which gateway served it, the status, whether the body completed. The line is
 * written when the response closes, so it is awaited.
 */
export async function routerLineFor(
  d: Deployment,
  requestId: string,
  timeoutMs = 5000,
): Promise<Record<string, unknown>> {
  let line: Record<string, unknown> | undefined;
  await waitUntil(
    () => (line = d.router.logLines().find((l) => l.msg === 'request' && l.clientReqId === requestId)) !== undefined,
    { what: `the router's log line for ${requestId}`, timeoutMs, intervalMs: 50 },
  );
  return line!;
}

/**
 * Which gateway served the request the client tagged `requestId`, by the log lines as an operator
 * pairs them: the router's line names it `clientReqId` beside the router's own `reqId`, which the
 * router forwarded and the gateway's `request` line names `clientReqId`. Undefined until both are written.
 */
export function gatewayServing(d: Deployment, gateways: readonly Gateway[], requestId: string): Gateway | undefined {
  const routed = d.router.logLines().find((l) => l.msg === 'request' && l.clientReqId === requestId);
  if (routed === undefined) return undefined;
  return gateways.find((g) => g.logLines().some((l) => l.msg === 'request' && l.clientReqId === routed.reqId));
}
