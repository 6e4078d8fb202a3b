/**
 * The store probe: every interval, read the store's `storage-id` (the directory store: a file read,
 * which fails on a lost mount or a root that is not this one; static HTTP and S3: one small GET) and
 * compare it with the id the gateway opened. A probe is bounded by 0.9 interval of the process's
 * running time (probeStore): one still running when its time is up counts as a timeout (the read
 * itself ends by the store's own timeouts), and the next starts one interval after the last one
 * started. Outcomes go to `StoreHealth`; its transitions are logged here (warn when the store becomes unreachable, info when it is back).
 */
import type { Logger } from 'pino';
import type { IdentityObject } from '../../storage-adapter/identity.ts';
import type { StoreHealth, StoreTransition } from './store-health.ts';

/** The probe's deadline is counted in this many steps (each at least `MIN_STEP_MS`): see probeStore. */
const DEADLINE_STEPS = 8;
const MIN_STEP_MS = 10;

/**
 * One probe: `undefined` when the store answered with our id, else the failure's code and why.
 * `timeoutMs` is counted in the process's running time, not in wall time: the deadline is a chain of
 * short timers, and the time each runs late is not counted. A timer runs late when the process stood
 * still (descheduled on a loaded machine, a long synchronous task), and then the read's answer,
 * which comes through the same event loop, could not be taken either: that time is the process's,
 * not the store's (the timers phase runs before the poll phase that takes the answer; one timer of
 * `timeoutMs` made a healthy store time out on a loaded machine, docs/router.md). The last timer
 * ends it in the phase after the poll (setImmediate), so an answer that came while it ran late is
 * taken first. A store that does not answer still fails after `timeoutMs` of the process's own
 * time, at the cost of eight timers a probe instead of one.
 */
export async function probeStore(
  identity: Pick<IdentityObject, 'read'>,
  storageId: string,
  timeoutMs: number,
): Promise<{ code: string; reason: string } | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => {
    const step = Math.max(MIN_STEP_MS, Math.ceil(timeoutMs / DEADLINE_STEPS));
    let left = timeoutMs;
    const next = () => {
      if (left <= 0) return void setImmediate(resolve, 'timeout');
      const ms = Math.min(step, left);
      left -= ms;
      timer = setTimeout(next, ms);
    };
    next();
  });
  try {
    const text = await Promise.race([identity.read(), timedOut]);
    if (text === 'timeout') return { code: 'upstream_timeout', reason: `no answer within ${timeoutMs} ms` };
    if (text === undefined) return { code: 'storage_mismatch', reason: 'storage-id is missing (a lost mount?)' };
    if (text.trim() !== storageId) return { code: 'storage_mismatch', reason: 'storage-id holds another id' };
    return undefined;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    // Catalogue codes (upstream_unreachable, upstream_timeout, storage_mismatch) pass; errno values
    // (EIO, ENOTCONN, ESTALE of a failed mount) mean the same to a client: the store is not there.
    const named = typeof code === 'string' && /^[a-z_]+$/.test(code) ? code : 'upstream_unreachable';
    return { code: named, reason: (err as Error).message };
  } finally {
    clearTimeout(timer);
  }
}

export interface StoreMonitor {
  /** One probe now (also what each period runs). */
  probeOnce(): Promise<void>;
  start(): void;
  stop(): Promise<void>;
}

export function createStoreMonitor(options: {
  identity: Pick<IdentityObject, 'read'>;
  storageId: string;
  health: StoreHealth;
  intervalMs: number;
  log: Logger;
}): StoreMonitor {
  const { identity, storageId, health, intervalMs, log } = options;
  const timeoutMs = Math.max(50, Math.floor(intervalMs * 0.9));
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let current: Promise<void> | undefined;

  health.onTransition((t: StoreTransition) => {
    const fields = { from: t.from, to: t.to, cause: t.cause, code: t.lastError?.code };
    if (t.to === 'unreachable')
      log.warn(fields, 'store unreachable: reads through routers go elsewhere, store calls here answer 503');
    else if (t.from === 'unreachable') log.info(fields, 'store reachable again');
    else log.info(fields, `store ${t.to}`);
  });

  const probeOnce = async () => {
    const failure = await probeStore(identity, storageId, timeoutMs);
    if (stopped) return;
    if (failure) log.debug({ code: failure.code, reason: failure.reason }, 'store probe failed');
    health.recordProbe(failure?.code);
  };

  const loop = () => {
    if (stopped) return;
    const startedAt = performance.now();
    current = probeOnce().finally(() => {
      if (stopped) return;
      timer = setTimeout(loop, Math.max(0, intervalMs - (performance.now() - startedAt)));
      timer.unref();
    });
  };

  return {
    probeOnce,
    start() {
      timer = setTimeout(loop, intervalMs);
      timer.unref();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current?.catch(() => {});
    },
  };
}
