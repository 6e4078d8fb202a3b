/**
 * Refuses state-changing requests a browser sends on behalf of another site. A browser attaches
 * the credentials it holds for this origin to requests any page makes it send: a Basic password
 * an operator once typed into its prompt is resent on its own after a 401, so a form posted from
 * any site could disable a principal or rotate a key (the response unreadable to that site, the
 * change made). Browsers say where a request comes from (`Sec-Fetch-Site`; `Origin` on every POST,
 * PUT and DELETE); clients outside browsers send neither, and the console's own calls are
 * same-origin. Reads stay open to other sites: a pre-signed link is meant to be followed from a
 * page anywhere.
 */
import { GatewayError } from '../server/errors.ts';
import type { Gate } from '../server/route-types.ts';

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The host (and port) an `Origin` names; undefined for `null` or a value that is not a URL. */
function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}

export const refuseCrossSiteWrites: Gate = (ctx) => {
  if (READS.has(ctx.req.method ?? 'GET')) return undefined;
  const { headers } = ctx.req;
  const site = headers['sec-fetch-site'];
  if (site !== undefined) {
    // `none`: typed or bookmarked by the user; `same-origin`: the console.
    if (site === 'same-origin' || site === 'none') return undefined;
    throw new GatewayError('cross_site_request');
  }
  // A browser without Fetch Metadata: its Origin must name the host it sent the request to.
  const origin = headers.origin;
  if (origin === undefined) return undefined;
  const host = headers.host ?? headers[':authority'];
  if (typeof host === 'string' && originHost(origin) === host.toLowerCase()) return undefined;
  throw new GatewayError('cross_site_request');
};
