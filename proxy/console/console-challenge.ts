/**
 * A 401 on a console route carries the Bearer challenge only, whatever refused it (a mistyped key at
 * sign-in, an ended session, a missing client certificate). The page's own `fetch` gets these
 * answers: a Basic challenge makes the browser open its own login prompt over the page, and a key
 * typed there becomes a credential the browser then resends to the gateway on its own, with every
 * request any site makes it send (see gates/cross-site.ts). The body and the failure count stay as
 * they are.
 */
import { PolicyError } from '../../policy/errors.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';

const BEARER_ONLY = { 'www-authenticate': 'Bearer realm="arkvory"' };

function isConsoleRoute(ctx: RequestContext): boolean {
  return ctx.route === '/console' || ctx.route.startsWith('/console/');
}

function bearerOnly(err: unknown): never {
  if ((err as { code?: unknown }).code === 'unauthorized')
    throw new PolicyError('unauthorized', (err as Error).message, { cause: err, headers: BEARER_ONLY });
  throw err;
}

/** `gate`, with the 401s it raises on console routes answered with the Bearer challenge only. */
export function withConsoleChallenge(gate: Gate): Gate {
  return (ctx) => {
    if (!isConsoleRoute(ctx)) return gate(ctx);
    let pending: undefined | Promise<void>;
    try {
      pending = gate(ctx);
    } catch (err) {
      bearerOnly(err);
    }
    return pending?.catch(bearerOnly);
  };
}
