/** Whose `traceparent` a request may continue (ARKVORY_TRACE_CONTEXT_FROM): any peer, trusted proxies only, or none. */
import type { Config } from '../config/config.ts';
import { createTrustedProxies } from '../router/forwarded.ts';

export function traceContextFrom(config: Config): (peer: string | undefined) => boolean {
  switch (config.tracing?.contextFrom ?? 'none') {
    case 'any':
      return () => true;
    case 'none':
      return () => false;
    case 'trusted-proxies': {
      const trusted = createTrustedProxies(config.trustedProxies);
      return (peer) => peer !== undefined && trusted.isTrusted(peer);
    }
  }
}
