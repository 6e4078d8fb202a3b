/**
 * Which challenges a 401 carries. Everywhere both, `Bearer` and `Basic` (clients that wait for a
 * challenge before sending credentials, wget, Maven, a browser's address bar, answer the Basic one),
 * except where a browser would answer the Basic one to harm, which get the Bearer line alone (a
 * scheme no browser answers by itself):
 *  - console routes: the page's own `fetch` gets these answers, and a Basic challenge opens the
 *    browser's login prompt over the page; a key typed there becomes a credential the browser then
 *    resends to the gateway by itself, with requests any site makes it send (see cross-site.ts);
 *  - a request a browser sends for another site (`Sec-Fetch-Site: cross-site` or `same-site`): the
 *    browser answers a Basic challenge with the user and password of the URL that page chose
 *    (`http://x:y@gateway/…`), a failed authentication counted against the visitor's address, so a
 *    page could get that address banned, everyone behind it included, by sending one window there
 *    twenty times (docs/rate-limits.md).
 * The body and the failure count are unchanged.
 */
import { PolicyError } from '../../policy/errors.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';

const BEARER_ONLY = { 'www-authenticate': 'Bearer realm="arkvory"' };

function bearerOnly(ctx: Pick<RequestContext, 'route' | 'req'>): boolean {
  if (ctx.route === '/console' || ctx.route.startsWith('/console/')) return true;
  const site = ctx.req.headers['sec-fetch-site'];
  return site === 'cross-site' || site === 'same-site';
}

/** A 401 as the same 401 with the Bearer challenge alone; any other error as it is. */
function asBearerOnly(err: unknown): unknown {
  if ((err as { code?: unknown }).code !== 'unauthorized') return err;
  return new PolicyError('unauthorized', (err as Error).message, { cause: err, headers: BEARER_ONLY });
}

function withBearerOnly(err: unknown): never {
  throw asBearerOnly(err);
}

/**
 * `err` with the Bearer challenge alone where `bearerOnly` says so, for a 401 answered before the
 * gates run (a link's parameters on a method its route does not take).
 */
export function browserSafeChallenge(ctx: Pick<RequestContext, 'route' | 'req'>, err: unknown): unknown {
  return bearerOnly(ctx) ? asBearerOnly(err) : err;
}

/** `gate`, with the 401s it raises answered with the Bearer challenge alone where `bearerOnly` says so. */
export function withBrowserSafeChallenge(gate: Gate): Gate {
  return (ctx) => {
    if (!bearerOnly(ctx)) return gate(ctx);
    let pending: undefined | Promise<void>;
    try {
      pending = gate(ctx);
    } catch (err) {
      withBearerOnly(err);
    }
    return pending?.catch(withBearerOnly);
  };
}
