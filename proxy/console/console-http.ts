/**
 * How every console response is framed: strict security headers (CSP without inline code, no
 * framing, no referrer), and the two kinds of console route: public pages and admin-scoped JSON
 * under `/console/api/`.
 */
import type { IncomingMessage } from 'node:http';
import type { AuditAction } from '../audit/audit-event.ts';
import type { RequestContext, Route } from '../server/route-types.ts';
import type { HttpMethod } from '../server/route-table.ts';
import { requestScheme, type TrustedProxies } from '../router/forwarded.ts';
import { CONSOLE_SECURITY_HEADERS } from './security-headers.ts';

export const API_PREFIX = '/console/api/';

function withSecurityHeaders(ctx: RequestContext): void {
  for (const [name, value] of CONSOLE_SECURITY_HEADERS) ctx.res.setHeader(name, value);
}

/**
 * Whether the browser reached us over https, so its cookie is `Secure` (`requestScheme`): a trusted
 * proxy in front says so, also when it reaches this listener over TLS (a plain-HTTP router in front
 * of an https writer: a browser drops a Secure cookie an http page sets); otherwise this listener's
 * own TLS decides, whatever the client's headers say.
 */
export function isHttps(req: IncomingMessage, trusted: TrustedProxies): boolean {
  return requestScheme(req, trusted).scheme === 'https';
}

/** A public console route (the page, its assets, the session probe). */
export function page(methods: readonly HttpMethod[], template: string, handle: Route['handle']): Route {
  return {
    methods,
    template,
    access: 'public',
    async handle(ctx) {
      withSecurityHeaders(ctx);
      await handle(ctx);
    },
  };
}

/** An admin-scoped console route that changes something, recorded in the audit trail as `action`. */
export function audited(
  action: AuditAction,
  methods: readonly HttpMethod[],
  template: string,
  handle: Route['handle'],
): Route {
  return { ...api(methods, template, handle), audit: action };
}

/** An admin-scoped console route; a relative template lives under `/console/api/`. */
export function api(methods: readonly HttpMethod[], template: string, handle: Route['handle']): Route {
  return {
    methods,
    template: template.startsWith('/console/') ? template : `${API_PREFIX}${template}`,
    access: 'admin',
    async handle(ctx) {
      withSecurityHeaders(ctx);
      await handle(ctx);
    },
  };
}
