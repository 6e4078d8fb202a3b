import type { Gate, Route } from './http-server.ts';
import { healthRoutes } from './routes/health.ts';
import type { Services } from './services.ts';

/**
 * Composes the feature modules for this role into one route list and one ordered gate chain
 * (auth → admission → rate limit). Each module owns its routes; the order of gates is fixed here.
 */
export async function buildApp(services: Services): Promise<{ routes: Route[]; gates: Gate[] }> {
  const routes: Route[] = [...healthRoutes(services)];
  const gates: Gate[] = [];
  return { routes, gates };
}
