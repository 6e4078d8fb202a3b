import type { Route } from './route-types.ts';
import { sendJson } from './http-errors.ts';
import type { Lifecycle } from './lifecycle.ts';
import type { Services } from './services.ts';

/** `/health/live` and `/health/status`, public and key-less for balancers; every serving role has them. */
export function liveAndStatusRoutes(lifecycle: Lifecycle): Route[] {
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
        // Only whether this process can serve.
        const serving = lifecycle.isServing;
        sendJson(res, serving ? 200 : 503, { status: serving ? 'serving' : lifecycle.state });
      },
    },
  ];
}

export function healthRoutes(services: Services): Route[] {
  const { lifecycle, config } = services;
  return [
    ...liveAndStatusRoutes(lifecycle),
    {
      methods: ['GET', 'HEAD'],
      template: '/health/ready',
      access: 'service',
      async handle({ res }) {
        const body: Record<string, unknown> = {
          status: lifecycle.isServing ? 'ready' : lifecycle.state,
          role: config.role,
          writable: config.role === 'api',
          sharedDownloads: services.coordinator.snapshot(),
        };
        for (const provider of services.readiness) Object.assign(body, provider());
        sendJson(res, lifecycle.isServing ? 200 : 503, body);
      },
    },
  ];
}
