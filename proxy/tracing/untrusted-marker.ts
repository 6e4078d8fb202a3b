/**
 * The `tracestate` list member by which a router with tracing off tells a gateway that the
 * `traceparent` it passes on is a client's it does not trust (docs/tracing.md, "Whose sampling
 * decision counts"). Such a router makes no sampling decision of its own, and a gateway that trusts
 * the router would otherwise follow the client's sampled flag as the router's. The member is under
 * the product's own key (W3C trace context: a vendor's member, at the front of the list); a gateway
 * reads it only from a peer in its ARKVORY_TRUSTED_PROXIES, and every process that continues a
 * trace takes the key out of what it continues, so a client's own `arkvory=` member is never
 * honoured nor passed on. Pure string work: the router with tracing off loads no tracing SDK.
 */

/** The product's `tracestate` key. */
export const TRACE_STATE_KEY = 'arkvory';
/** Its value for "the sender's peer was not trusted with sampling". */
export const UNTRUSTED_VALUE = 'untrusted';

/** W3C trace context: at most 32 list members. */
const MAX_MEMBERS = 32;

/**
 * `tracestate` (the header as node:http gives it, joined or not) with any `arkvory` member taken
 * out and `arkvory=untrusted` put first, the members past 32 dropped from the end (W3C's rule).
 */
export function markUntrusted(tracestate: string | string[] | undefined): string {
  const joined = Array.isArray(tracestate) ? tracestate.join(',') : (tracestate ?? '');
  const members = [`${TRACE_STATE_KEY}=${UNTRUSTED_VALUE}`];
  for (const raw of joined.split(',')) {
    if (members.length >= MAX_MEMBERS) break;
    const member = raw.trim();
    if (member === '') continue;
    const eq = member.indexOf('=');
    // A malformed member without `=` is left for the reader to drop, as it would have been.
    if ((eq === -1 ? member : member.slice(0, eq).trim()) === TRACE_STATE_KEY) continue;
    members.push(member);
  }
  return members.join(',');
}

/**
 * What a router with tracing off sends the gateway for a request's trace context, in place of the
 * client's `traceparent`/`tracestate` (proxy-handler.ts); undefined: the client's as it came.
 * - A peer the router would not continue (ARKVORY_TRACE_CONTEXT_FROM): none, the gateway starts
 *   its own trace.
 * - A peer in the router's ARKVORY_TRUSTED_PROXIES: as it came, a marker from a router in front
 *   included (the gateway trusts that proxy through this router, as it would trust it directly).
 * - Anyone else (`any`): the client's `traceparent` (its trace id kept) with `arkvory=untrusted`
 *   in its `tracestate`, so a gateway that trusts the router does not follow the client's flag.
 */
export function relayedTraceContext(
  headers: Readonly<Record<string, string | string[] | undefined>>,
  peer: string | undefined,
  mayContinue: (peer: string | undefined) => boolean,
  isTrusted: (peer: string) => boolean,
): readonly string[] | undefined {
  const traceparent = headers.traceparent;
  const tracestate = headers.tracestate;
  if (traceparent === undefined && tracestate === undefined) return undefined;
  if (!mayContinue(peer)) return [];
  if ((peer !== undefined && isTrusted(peer)) || traceparent === undefined) return undefined;
  return [
    'traceparent',
    Array.isArray(traceparent) ? traceparent.join(', ') : traceparent,
    'tracestate',
    markUntrusted(tracestate),
  ];
}
