import { PolicyError } from '../../policy/errors.ts';
import type { Route } from './route-types.ts';
import { sendJson } from './http-errors.ts';
import type { Lifecycle } from './lifecycle.ts';
import type { Services } from './services.ts';

/**
 * `/health/live` and `/health/status`, public and key-less for balancers; every serving role has them.
 * `status` adds fields to `/health/status` (the store's health). Its code follows only whether this
 * process serves: a gateway whose store is unreachable still answers 200 with `store.state:
 * "unreachable"`, so a router keeps sending it writes (the writer answers them 503
 * `store_unreachable`) and takes reads elsewhere (docs/router.md, "Store health").
 */
export function liveAndStatusRoutes(
  lifecycle: Lifecycle,
  status: ReadonlyArray<() => Record<string, unknown>> = [],
  before: ReadonlyArray<() => Promise<void>> = [],
): Route[] {
  return [
    {
      methods: ['GET', 'HEAD'],
      template: '/health/live',
      access: 'public',
      async handle({ res }) {
        sendJson(res, 200, { status: 'live' });
      },
    },
    {
      methods: ['GET', 'HEAD'],
      template: '/health/status',
      access: 'public',
      async handle({ res }) {
        const unanswered = await readInstance(before);
        // Only whether this process can serve.
        const serving = lifecycle.isServing && unanswered === undefined;
        const body: Record<string, unknown> = { status: healthState(lifecycle, 'serving', unanswered) };
        if (unanswered !== undefined) body.reason = unanswered;
        for (const provider of status) Object.assign(body, provider());
        sendJson(res, serving ? 200 : 503, body);
      },
    },
  ];
}

export function healthRoutes(services: Services): Route[] {
  const { lifecycle, config } = services;
  return [
    ...liveAndStatusRoutes(lifecycle, services.status, services.beforeHealth),
    {
      methods: ['GET', 'HEAD'],
      template: '/health/ready',
      access: 'service',
      async handle({ res }) {
        const unanswered = await readInstance(services.beforeHealth ?? []);
        const serving = lifecycle.isServing && unanswered === undefined;
        const body: Record<string, unknown> = {
          status: healthState(lifecycle, 'ready', unanswered),
          ...(unanswered === undefined ? {} : { reason: unanswered }),
          role: config.role,
          writable: config.role === 'api',
          sharedDownloads: services.coordinator.snapshot(),
        };
        for (const provider of [...services.status, ...services.readiness]) Object.assign(body, provider());
        sendJson(res, serving ? 200 : 503, body);
      },
    },
  ];
}

/**
 * Runs the reads a worker's health answer needs from its coordinating process, at once (each has its
 * own deadline, instance-reads.ts); the message of one that was `unavailable` (not answered in time,
 * or the coordinating process gone), else undefined. The answer then shows what was read last.
 */
async function readInstance(before: ReadonlyArray<() => Promise<void>>): Promise<string | undefined> {
  const outcomes = await Promise.allSettled(before.map((step) => step()));
  for (const outcome of outcomes) {
    if (outcome.status === 'fulfilled') continue;
    if (outcome.reason instanceof PolicyError && outcome.reason.code === 'unavailable') return outcome.reason.message;
    throw outcome.reason;
  }
  return undefined;
}

/** A process not serving says why (starting, draining, fenced); one serving whose instance did not answer, `unavailable`. */
function healthState(lifecycle: Lifecycle, serving: string, unanswered: string | undefined): string {
  if (!lifecycle.isServing) return lifecycle.state;
  return unanswered === undefined ? serving : 'unavailable';
}
