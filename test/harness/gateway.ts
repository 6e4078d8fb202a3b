/**
 * A real `arkvory` process (gateway, router, rules service: any `bin/arkvory.js … serve`) started
 * with the given variables on a free loopback port (or a given host and port), and the wait for its
 * `/health/status`. Nothing here stops it on its own: the caller (or test/support's vitest layer) does.
 */
import path from 'node:path';
import { freeLoopbackPort } from './ports.ts';
import { startProcess, processEnv, type ManagedProcess } from './managed-process.ts';
import { ARKVORY_BIN, REPO_ROOT } from './paths.ts';
import { runProcess, type ProcessResult } from './run-process.ts';
import { waitForHttp, waitUntil } from './wait.ts';

export interface GatewayOptions {
  /** ARKVORY_* variables and any other the process needs (PATH, HOME, LANG come from this process). */
  env?: Record<string, string | undefined>;
  /** The CLI arguments; `['serve']` unless given (e.g. `['rules-service', 'serve']`). */
  args?: readonly string[];
  /** ARKVORY_HOST; 127.0.0.1 unless given. */
  host?: string;
  /** ARKVORY_PORT; a free loopback port unless given. */
  port?: number;
  /** A launcher the process runs under, e.g. `['prlimit', '--nofile=256:256', '--']` or `ip netns exec`. */
  wrap?: readonly string[];
  /** Names the process in failure messages. */
  name?: string;
  /** The checkout whose `bin/arkvory.js` runs (another branch, to compare); this one unless given. */
  checkout?: string;
}

export interface GatewayProcess extends ManagedProcess {
  readonly url: string;
  readonly port: number;
}

/** `serving`: /health/status answers 200; `listening`: it answers at all; `none`: do not wait. */
export type StartedWhen = 'serving' | 'listening' | 'none';

/** How long a start may take unless the caller says otherwise (a loaded 2-core machine). */
export const START_TIMEOUT_MS = 30_000;

/** Spawns the process and returns at once. */
export async function spawnGateway(options: GatewayOptions = {}): Promise<GatewayProcess> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? (await freeLoopbackPort());
  const env = processEnv({ ...options.env, ARKVORY_HOST: host, ARKVORY_PORT: String(port) });
  const args = options.args ?? ['serve'];
  const checkout = options.checkout ?? REPO_ROOT;
  const bin = path.join(checkout, path.relative(REPO_ROOT, ARKVORY_BIN));
  const [command, ...argv] = [...(options.wrap ?? []), process.execPath, bin, ...args];
  const child = startProcess(command!, argv, {
    name: options.name ?? `arkvory ${args.join(' ')}`,
    env,
    cwd: checkout,
  });
  return Object.assign(child, { url: `http://${host}:${port}`, port });
}

/** Waits until `/health/status` answers (200 for `serving`); fails at once if the process exits. */
/**
 * Until the gateway at `baseUrl` reports its store `ok` again: after an outage it takes reads and
 * writes once its probe passed twice in a row (store health's hysteresis, docs/router.md); meanwhile
 * it answers 503 `store_unreachable`.
 */
export async function waitForStoreOk(baseUrl: string, timeoutMs = 20_000): Promise<void> {
  await waitUntil(
    async () => {
      const res = await fetch(`${baseUrl}/health/status`);
      return ((await res.json()) as { store?: { state?: string } }).store?.state === 'ok';
    },
    { what: `the store of ${baseUrl} to be ok again`, timeoutMs, intervalMs: 100 },
  );
}

/**
 * Until the gateway at `baseUrl` has no slice cache fill in flight: a fill's readers get their last
 * byte once the slice is verified, and its file is finished behind them, so a test that looks at
 * the cache directory right after a read waits for this first.
 */
export async function waitForSliceFills(baseUrl: string, timeoutMs = 20_000): Promise<void> {
  await waitUntil(
    async () => /^arkvory_slice_cache_fills_in_flight 0$/m.test(await (await fetch(`${baseUrl}/metrics`)).text()),
    { what: `the slice cache fills of ${baseUrl} to finish`, timeoutMs, intervalMs: 50 },
  );
}

export async function waitForHealth(
  gateway: GatewayProcess,
  options: { until?: 'serving' | 'listening'; timeoutMs?: number } = {},
): Promise<void> {
  const until = options.until ?? 'serving';
  await waitForHttp(`${gateway.url}/health/status`, {
    what: `${gateway.name} at ${gateway.url} to be ${until}`,
    timeoutMs: options.timeoutMs ?? START_TIMEOUT_MS,
    process: gateway,
    ...(until === 'listening' ? { isReady: () => true } : {}),
  });
}

/** Spawns the process and waits as `waitFor` says (serving unless given); SIGKILLs it if the wait fails. */
export async function startGateway(
  options: GatewayOptions & { waitFor?: StartedWhen; timeoutMs?: number } = {},
): Promise<GatewayProcess> {
  const gateway = await spawnGateway(options);
  const waitFor = options.waitFor ?? 'serving';
  if (waitFor === 'none') return gateway;
  try {
    await waitForHealth(gateway, { until: waitFor, ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}) });
  } catch (err) {
    await gateway.stop('SIGKILL');
    throw err;
  }
  return gateway;
}

/** Runs one `arkvory` CLI command to its end (stdin: `input`, or empty). */
export function runCli(
  args: readonly string[],
  env: Record<string, string | undefined>,
  input = '',
): Promise<ProcessResult> {
  return runProcess(process.execPath, [ARKVORY_BIN, ...args], { env: processEnv(env), cwd: REPO_ROOT, input });
}

/**
 * For a failed wait on a fence: rethrows `err` with the gateway's lease log lines (acquisition,
 * renewal warnings, the fence), which a log tail may have scrolled past.
 */
export function withLeaseLines(gateway: Pick<ManagedProcess, 'name' | 'logLines'>): (err: Error) => never {
  return (err) => {
    const lease = gateway.logLines().filter((l) => /lease|fenc|renew|slot/.test(String(l.msg)));
    throw new Error(
      `${err.message}\n${gateway.name}'s lease lines:\n${lease.map((l) => JSON.stringify(l)).join('\n')}`,
    );
  };
}
