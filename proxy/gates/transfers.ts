import {
  AdmissionQueue,
  type AdmissionQueueOptions,
  type AdmissionSnapshot,
  type Release,
  type TransferKind,
} from '../../policy/admission/index.ts';
import {
  type Ceiling,
  createBandwidthGovernors,
  type BandwidthConfig,
  type BandwidthGovernors,
  type BandwidthSnapshot,
  type ByteMeter,
} from '../../policy/bandwidth/index.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Coordinator, LeaseStanding } from '../../policy/lease/coordinator.ts';
import { localDownloadCeilings } from '../../policy/lease/shares.ts';
import type { Config } from '../config/config.ts';
import type { Clock } from '../../policy/clock.ts';
import type { Principal, RepositoryCeilings } from '../../policy/auth/principal.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import { byteCounts } from '../server/http2-messages.ts';
import { pacedBy } from '../server/front-door/pacing.ts';
import { isRefusal, type LiveTransferHandle, LiveTransfers } from './live-transfers.ts';
import { markRevoked } from './revoked-responses.ts';
import { endFailed, type RequestTrace } from '../tracing/request-trace.ts';

/**
 * Everything that paces and admits bodies in this process: one governor per direction (download
 * ceilings lowered to this gateway's share in the shared profile), the admission queue, and the
 * lease check that makes a fenced process refuse every new quantum.
 */
export interface Transfers {
  /** The instance's governors, as far as reading them goes (a worker reads the coordinating process's). */
  readonly governors: Readonly<Record<'download' | 'upload', { snapshot(): BandwidthSnapshot }>>;
  readonly admission: { snapshot(): AdmissionSnapshot };
  /** Each body request of this process now, queued or active (the console's transfer list). */
  readonly live: LiveTransfers;
  /** Waits for an admission slot (429 `busy` beyond the queue or wait bound). */
  admit(principalId: string, kind: TransferKind, signal?: AbortSignal): Promise<Release>;
  /** `admit` when a slot is free at once: the release, or undefined (then `admit`, which waits or refuses). */
  tryAdmit(principalId: string, kind: TransferKind): Release | undefined;
  /**
   * A meter for one body stream of `principalId` (bandwidth weight `weight`, default 1) in a
   * direction, also paced by `ceilings` (its groups', its repository's).
   */
  meter(
    direction: 'download' | 'upload',
    principalId: string,
    weight?: number,
    ceilings?: readonly Ceiling[],
  ): ByteMeter;
  /**
   * One of the `max` concurrent transfers of `repository` on this instance: its release, or PolicyError
   * `busy` (429, retry after 1 s) when all are taken. At once in a process that owns its policy
   * state; a promise in a worker, which asks the coordinating process.
   */
  holdRepository(repository: string, max: number): (() => void) | Promise<() => void>;
  /** The shared ceilings of a transfer: each of the principal's groups and its repository, in this direction. */
  ceilingsFor(
    direction: 'download' | 'upload',
    principal: Principal,
    repository: string | undefined,
    limits: RepositoryCeilings | undefined,
  ): Ceiling[];
  /** Aggregates for /health/ready: no principal id, key, path or file name. */
  snapshot(): Record<string, unknown>;
  close(): void;
}

/** The download ceilings this process enforces: local ones, or its share of the stored policy. */
export function downloadCeilings(config: Config): {
  downloadBytesPerSec: number;
  downloadBytesPerSecPerPrincipal: number;
} {
  const local = {
    downloadBytesPerSec: config.bandwidth.downloadBytesPerSec,
    downloadBytesPerSecPerPrincipal: config.bandwidth.downloadBytesPerSecPerPrincipal,
  };
  if (!config.shared) return local;
  return localDownloadCeilings(
    {
      slots: config.shared.slots,
      downloadBytesPerSec: config.shared.downloadBytesPerSec,
      downloadBytesPerSecPerPrincipal: config.shared.downloadBytesPerSecPerPrincipal,
    },
    local,
  );
}

/**
 * A principal counts toward this gateway's weight sum while it has a take waiting or was granted
 * within two renewal periods: a download between two reads is still active.
 */
export const WEIGHT_WINDOW_MS = 4_000;

/**
 * Shared profile: the download ceiling is the leased share, which follows the weight sums the
 * gateways report (docs/shared-profile.md, "Weighted shares"), lowered by the local variable. The
 * governor was built with floor(rate / SLOTS), which fixed its quantum; the share then moves the rate.
 * Called by the process that holds the lease and the instance's governors; standalone, nothing to follow.
 */
export function followLeasedShare(config: Config, coordinator: Coordinator, governors: BandwidthGovernors): void {
  if (!config.shared) return;
  const local = config.bandwidth.downloadBytesPerSec;
  // The coordinator answers a whole share in [0, rate]; whatever else arrives pauses, never a negative rate.
  const apply = (share: number) => {
    const rate = Number.isFinite(share) && share > 0 ? Math.floor(share) : 0;
    governors.download.setRate(local > 0 ? Math.min(rate, local) : rate);
  };
  apply(coordinator.shareBytesPerSec);
  coordinator.onShare(apply);
  coordinator.reportWeightSum(() => governors.download.activeWeightSum(WEIGHT_WINDOW_MS));
}

/** The ceilings of this gateway's two governors. */
export function governorCeilings(config: Config): BandwidthConfig {
  return {
    ...downloadCeilings(config),
    uploadBytesPerSec: config.bandwidth.uploadBytesPerSec,
    uploadBytesPerSecPerPrincipal: config.bandwidth.uploadBytesPerSecPerPrincipal,
  };
}

/** The admission queue's bounds from the config. */
export function admissionOptions(config: Config): AdmissionQueueOptions {
  return {
    maxDownloads: config.admission.maxDownloads,
    maxDownloadsPerPrincipal: config.admission.maxDownloadsPerPrincipal,
    maxUploadsPerPrincipal: config.admission.maxUploadsPerPrincipal,
    queueLength: config.admission.queueLength,
    waitMs: config.admission.waitMs,
  };
}

/** The transfers of a process that owns its policy state (one worker, or the coordinating process of several). */
export interface LocalTransfers extends Transfers {
  readonly governors: BandwidthGovernors;
  readonly admission: AdmissionQueue;
  holdRepository(repository: string, max: number): () => void;
}

/** Active transfers per repository with a bound, counted by the process that owns the instance's policy state. */
export class RepositoryHolds {
  readonly #active = new Map<string, number>();

  /** One of the `max` transfers of `repository`: its release (idempotent), or PolicyError `busy`. */
  hold(repository: string, max: number): () => void {
    const active = this.#active.get(repository) ?? 0;
    if (active >= max)
      throw new PolicyError('busy', `Repository ${repository} has ${max} transfers running; retry shortly.`, {
        headers: { 'retry-after': '1' },
      });
    this.#active.set(repository, active + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = this.#active.get(repository)! - 1;
      if (left === 0) this.#active.delete(repository);
      else this.#active.set(repository, left);
    };
  }
}

/**
 * This process's transfers, granting while `standing` permits. In the shared profile the lease's
 * holder also makes the download governor follow the leased share (`followLeasedShare`).
 */
export function createTransfers(config: Config, clock: Clock, standing: LeaseStanding): LocalTransfers {
  const isPermitted = () => standing.isPermitted();
  // The governors ask the lease before every grant and fence themselves at the first "no".
  const governors = createBandwidthGovernors({ clock, isPermitted }, governorCeilings(config));
  const admission = new AdmissionQueue(admissionOptions(config));
  const repositories = new RepositoryHolds();
  standing.onFenced(() => {
    governors.download.fence();
    governors.upload.fence();
    admission.fence();
  });
  return {
    governors,
    admission,
    live: new LiveTransfers(clock),
    admit(principalId, kind, signal) {
      if (!isPermitted()) return Promise.reject(new PolicyError('lease_lost'));
      return admission.acquire(principalId, kind, signal);
    },
    tryAdmit(principalId, kind) {
      return isPermitted() ? admission.tryAcquire(principalId, kind) : undefined;
    },
    meter(direction, principalId, weight, ceilings) {
      return governors[direction].meter(principalId, weight, ceilings);
    },
    holdRepository(repository, max) {
      return repositories.hold(repository, max);
    },
    ceilingsFor(direction, principal, repository, limits) {
      // Downloads may be served by every gateway of the shared profile: each enforces its
      // floor(rate / SLOTS) of a group's or repository's ceiling, so together they never exceed it.
      // Uploads reach the writer only, which enforces the whole ceiling.
      const slots = direction === 'download' && config.shared ? config.shared.slots : 1;
      const field = direction === 'download' ? 'downloadBytesPerSec' : 'uploadBytesPerSec';
      const ceilings: Ceiling[] = [];
      for (const group of principal.groupCeilings ?? [])
        if (group[field] > 0)
          ceilings.push({ key: `group:${group.name}`, rateBytesPerSec: Math.floor(group[field] / slots) });
      if (repository !== undefined && limits !== undefined && limits[field] > 0)
        ceilings.push({ key: `repository:${repository}`, rateBytesPerSec: Math.floor(limits[field] / slots) });
      return ceilings;
    },
    snapshot() {
      return transfersReadiness(admission.snapshot(), governors.download.snapshot(), governors.upload.snapshot());
    },
    close() {
      admission.close();
      governors.download.close();
      governors.upload.close();
    },
  };
}

/** The `transfers` field of /health/ready, from the admission queue's and the governors' snapshots. */
export function transfersReadiness(
  a: AdmissionSnapshot,
  d: BandwidthSnapshot,
  u: BandwidthSnapshot,
): Record<string, unknown> {
  return {
    transfers: {
      downloads: {
        ...a.downloads,
        bytesGranted: d.grantedBytes,
        waitingQuanta: d.waitingQuanta,
        bytesPerSecond: d.rateBytesPerSec,
        bytesPerSecondPerPrincipal: d.perPrincipalBytesPerSec,
      },
      uploads: {
        ...a.uploads,
        bytesGranted: u.grantedBytes,
        waitingQuanta: u.waitingQuanta,
        bytesPerSecond: u.rateBytesPerSec,
        bytesPerSecondPerPrincipal: u.perPrincipalBytesPerSec,
      },
    },
  };
}

/** How a running download is asked again whether its credential still admits it (auth-gate.ts). */
export interface TransferStanding {
  /** Throws the refusal once the request may no longer go on (`requestStillAuthorized`). */
  ask(ctx: RequestContext): undefined | Promise<void>;
  /** Whether a change that may revoke came after the request was authorized (`changedSinceAuthorized`). */
  changedSince(ctx: RequestContext): boolean;
}

/**
 * Wraps a body route so the request holds an admission slot of its principal while it runs: a
 * `GET` of a `downloads` route (`…/content`, `…/apt/{file}`) a download slot, `PUT` (a whole upload
 * or one part) an upload slot. Requests that move no body (HEAD, session JSON) are not admitted.
 */
export function withAdmission(route: Route, transfers: Transfers, standing?: TransferStanding): Route {
  const kindFor = (method: string | undefined): TransferKind | undefined => {
    if (method === 'PUT') return 'upload';
    if (method === 'GET' && route.downloads) return 'download';
    return undefined;
  };
  return {
    ...route,
    handle(ctx) {
      const kind = kindFor(ctx.req.method);
      if (!kind || !ctx.principal) return route.handle(ctx);
      const moved = byteCounts(ctx.req, ctx.res);
      const live = transfers.live.begin({
        kind,
        principal: ctx.principal.name,
        route: ctx.route,
        repository: ctx.params.repo,
        // Methods of a class: bound here, the live table calls them later on their own.
        bytes: kind === 'download' ? () => moved.written() : () => moved.read(),
        ...(kind === 'download' && standing ? downloadStanding(ctx, standing) : {}),
      });
      // A change between the request's authorization and this entry found no entry to ask: asked now.
      if (kind === 'download' && standing?.changedSince(ctx)) void askOnce(ctx, standing);
      // A free slot needs no wait, so no signal either (one is made on first use).
      const now = transfers.tryAdmit(ctx.principal.id, kind);
      if (now === undefined) return waitAndRun(route, transfers, ctx, ctx.principal, kind, live);
      if (ctx.trace?.isRecording)
        ctx.trace
          .startChild('arkvory.admission', { 'arkvory.transfer.kind': kind, 'arkvory.admission.waited': false })
          .end();
      return runAdmitted(route, ctx, now, live);
    },
  };
}

/**
 * A download asked again on every change that may revoke it (live-transfers.ts `recheckOnChange`),
 * cut once refused: its stream is reset (HTTP/1.1: the connection closed before the body's end;
 * HTTP/2: RST_STREAM), also while it waits for an admission slot. A client sees an incomplete body,
 * never the rest of it.
 */
function downloadStanding(
  ctx: RequestContext,
  standing: TransferStanding,
): { stillAuthorized: () => undefined | Promise<void>; cut: (refusal: Error) => void } {
  return {
    stillAuthorized: () => standing.ask(ctx),
    cut: (refusal) => {
      if (ctx.res.destroyed || ctx.res.writableFinished) return;
      ctx.log.info(
        { code: (refusal as { code?: unknown }).code, principal: ctx.principal?.name },
        'download cut: its credential no longer admits it',
      );
      markRevoked(ctx.res);
      ctx.res.destroy(refusal);
    },
  };
}

/** One question now, as a round of `recheckOnChange` would ask it; not telling (unavailable) leaves it to the next round. */
async function askOnce(ctx: RequestContext, standing: TransferStanding): Promise<void> {
  const { cut } = downloadStanding(ctx, standing);
  try {
    await standing.ask(ctx);
  } catch (err) {
    if (isRefusal(err)) cut(err as Error);
  }
}

async function waitAndRun(
  route: Route,
  transfers: Transfers,
  ctx: RequestContext,
  principal: Principal,
  kind: TransferKind,
  live: LiveTransferHandle,
): Promise<void> {
  let release: Release;
  const span = ctx.trace?.isRecording
    ? ctx.trace.startChild('arkvory.admission', { 'arkvory.transfer.kind': kind, 'arkvory.admission.waited': true })
    : undefined;
  try {
    release = await transfers.admit(principal.id, kind, ctx.signal);
  } catch (err) {
    live.end();
    if (span) endFailed(span, err);
    throw err;
  }
  span?.end();
  return runAdmitted(route, ctx, release, live);
}

/** Runs the route holding the slot; the slot and the live entry end with it, however it ends. */
function runAdmitted(route: Route, ctx: RequestContext, release: Release, live: LiveTransferHandle): Promise<void> {
  live.admitted();
  let handled: Promise<void>;
  try {
    handled = route.handle(ctx);
  } catch (err) {
    handled = Promise.reject(err);
  }
  return handled.finally(() => {
    release();
    live.end();
  });
}

/** A content route's meter: at once, or (a worker asking for its repository's bound) once the hold is granted. */
export type ContentMeter = ByteMeter | undefined | Promise<ByteMeter | undefined>;

/**
 * The meters the content routes use: the request's principal in the route's direction, paced also by
 * its groups' and its repository's ceilings. A repository with a bound on concurrent transfers holds
 * one of them from the first meter of the request until its response closes (429 `busy` beyond it).
 * The routes ask for a meter after the grant check, which has read the repository's ceilings, and
 * before their response's head, so a refusal is still a 429.
 */
export function contentMeters(
  transfers: Transfers,
  repositoryCeilings: (repository: string) => RepositoryCeilings | undefined = () => undefined,
): {
  download(ctx: RequestContext): ContentMeter;
  upload(ctx: RequestContext): ContentMeter;
} {
  const holding = new WeakSet<RequestContext>();
  const meter =
    (direction: 'download' | 'upload') =>
    (ctx: RequestContext): ContentMeter => {
      const principal = ctx.principal;
      if (!principal) return undefined;
      const repository = ctx.params.repo;
      const limits = repository === undefined ? undefined : repositoryCeilings(repository);
      if (repository !== undefined && limits !== undefined && limits.maxTransfers > 0 && !holding.has(ctx)) {
        // The catalog, the store or a quota answered first: a client gone meanwhile had its 'close'
        // already, and a hold released on it would never come back (the repository's bound, spent).
        ctx.signal.throwIfAborted();
        const held = transfers.holdRepository(repository, limits.maxTransfers);
        holding.add(ctx);
        if (typeof held !== 'function')
          return heldUntilClose(ctx, held).then(() =>
            pacedMeter(transfers, direction, ctx, principal, repository, limits),
          );
        ctx.res.once('close', held);
      }
      return pacedMeter(transfers, direction, ctx, principal, repository, limits);
    };
  return { download: meter('download'), upload: meter('upload') };
}

function pacedMeter(
  transfers: Transfers,
  direction: 'download' | 'upload',
  ctx: RequestContext,
  principal: Principal,
  repository: string | undefined,
  limits: RepositoryCeilings | undefined,
): ByteMeter {
  const ceilings = transfers.ceilingsFor(direction, principal, repository, limits);
  const paced = transfers.meter(direction, principal.id, principal.bandwidthWeight, ceilings);
  // While a take waits, the idle timeouts do not cut the request (front-door/pacing.ts).
  pacedBy(ctx.req, paced);
  return ctx.trace?.isRecording ? pacingRecorded(paced, ctx.trace) : paced;
}

/** Keeps a repository transfer granted later until the response closes; one granted after the close goes back at once. */
function heldUntilClose(ctx: RequestContext, held: Promise<() => void>): Promise<void> {
  let release: (() => void) | undefined;
  let closed = false;
  ctx.res.once('close', () => {
    closed = true;
    release?.();
  });
  return held.then((granted) => {
    release = granted;
    if (!closed) return;
    granted();
    throw ctx.signal.reason ?? new PolicyError('unavailable');
  });
}

/** The meter, adding up on the request's trace how long the governors held its body and how many bytes passed. */
function pacingRecorded(meter: ByteMeter, trace: RequestTrace): ByteMeter {
  return {
    quantumBytes: meter.quantumBytes,
    async take(bytes, signal) {
      const startedMs = performance.now();
      await meter.take(bytes, signal);
      trace.pacedMs += performance.now() - startedMs;
      trace.pacedWaits++;
      trace.pacedBytes += bytes;
    },
    tryTake(bytes) {
      const passed = meter.tryTake(bytes);
      if (passed) trace.pacedBytes += bytes;
      return passed;
    },
  };
}
