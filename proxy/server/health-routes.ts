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
        for (const step of before) await step();
        // Only whether this process can serve.
        const serving = lifecycle.isServing;
        const body: Record<string, unknown> = { status: serving ? 'serving' : lifecycle.state };
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
        for (const step of services.beforeHealth ?? []) await step();
        const body: Record<string, unknown> = {
          status: lifecycle.isServing ? 'ready' : lifecycle.state,
          role: config.role,
          writable: config.role === 'api',
          sharedDownloads: services.coordinator.snapshot(),
        };
        for (const provider of [...services.status, ...services.readiness]) Object.assign(body, provider());
        sendJson(res, lifecycle.isServing ? 200 : 503, body);
      },
    },
  ];
}
