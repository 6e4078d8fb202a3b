/**
 * Whose `traceparent` a request may continue (ARKVORY_TRACE_CONTEXT_FROM): any peer, trusted
 * proxies only, or none. A router with tracing off passes on to the gateway only what it would
 * continue itself.
 */
import type { Config } from '../config/config.ts';
import { createTrustedProxies } from '../router/forwarded.ts';

export function traceContextFrom(config: Config): (peer: string | undefined) => boolean {
  switch (config.traceContextFrom) {
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
