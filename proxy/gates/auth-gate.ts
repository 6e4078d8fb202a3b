import { authorize } from '../../policy/auth/authorize.ts';
import { unauthorized, type Authenticator } from '../../policy/auth/authenticator.ts';
import { hasPresignParams } from '../../policy/auth/presign-signature.ts';
import type { PresignedLinks } from '../../policy/auth/presigned-links.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import type { Principal, Scope } from '../../policy/auth/principal.ts';
import { isPromise } from '../../lib/maybe-promise.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';
import type { Lifecycle } from '../server/lifecycle.ts';
import type { Clock } from '../../policy/clock.ts';
import { certificateExpired } from '../../policy/auth/client-certificate.ts';
import { GatewayError } from '../server/errors.ts';
import { createTrustedProxies, normalizeAddress, requestScheme, type TrustedProxies } from '../router/forwarded.ts';
import type { Config } from '../config/config.ts';
import { isLoopbackAddress, peerCertificateOf } from '../tls/peer-certificate.ts';
import { disabledSince, readCookie, SECURE_SESSION_COOKIE, SESSION_COOKIE } from '../console/sessions.ts';

/** How the transport counts (docs/tls.md): client certificates, and credentials sent in clear. */
export interface TransportPolicy {
  /** `off`: certificates are ignored; `optional`: one authenticates when no other credential is sent; `require`: every authenticated route needs a verified one. */
  readonly clientCert: 'off' | 'optional' | 'require';
  /** Credentials over plain HTTP from a non-loopback peer are refused (403 `tls_required`). */
  readonly refusePlainHttpCredentials: boolean;
  /** Proxies that say how the client reached them (`requestScheme`: X-Forwarded-Proto, else Forwarded's proto=). */
  readonly trusted: TrustedProxies;
  /** Wall time: a client certificate that expires stops working on open connections too. */
  readonly clock: Clock;
}

/** Client certificates and credentials in clear, as configured (docs/tls.md). */
export function transportPolicy(config: Config, clock: Clock): TransportPolicy {
  return {
    clientCert: config.tls?.clientCert ?? 'off',
    refusePlainHttpCredentials: config.refusePlainHttpCredentials,
    trusted: createTrustedProxies(config.trustedProxies),
    clock,
  };
}

/**
 * Credentials issued to a principal as it was then (a console session): void once the principal
 * was disabled again after `principalDisabledAtMs` (console/sessions.ts `disabledSince`), even once
 * it is enabled again.
 */
export interface IssuedCredentials {
  readonly authorization: string;
  readonly principalDisabledAtMs: number | null;
}

/**
 * The first gate: authenticates every non-public request, then checks the route's access level
 * against the key's scopes and the principal's grant on `:repo`. A fenced gateway refuses every
 * request subject to authorization with 503 `lease_lost`. `credentials` picks what is checked
 * (default the Authorization header; the console supplies its session's key for its own routes).
 * A request with a pre-signed link's query parameters is the link's principal (`links`), whatever
 * Authorization header it also carries (`carriesLink`), still subject to the grant and scope checks
 * of its key. With `transport`,
 * a request carrying no other credential is the principal its verified client certificate is bound
 * to (checked per request: an unbinding reaches open connections too), and credentials sent in clear
 * may be refused.
 */
export function createAuthGate(
  auth: Authenticator,
  lifecycle: Lifecycle,
  credentials: (ctx: RequestContext) => string | IssuedCredentials | undefined | Promise<IssuedCredentials> = (ctx) =>
    ctx.req.headers.authorization,
  links?: PresignedLinks,
  transport?: TransportPolicy,
): Gate {
  return (ctx) => {
    if (ctx.access === 'public') return transport ? checkPublic(ctx, transport) : undefined;
    if (lifecycle.state === 'fenced') throw new PolicyError('lease_lost');
    // Before anything is read: a change after this may not be in what admits the request.
    generationAtGate.set(ctx, auth.cacheGeneration);
    const presigned = links !== undefined && carriesLink(ctx);
    // Before the console's session lookup: a session cookie sent in clear is refused as such even
    // when that transport does not read its name (a `__Host-` one reaching a plain-HTTP hop).
    if (
      transport?.refusePlainHttpCredentials &&
      (presigned || carriesCredential(ctx)) &&
      sentInClear(ctx, transport.trusted)
    )
      throw new GatewayError('tls_required');
    const given = presigned ? undefined : credentials(ctx);
    // A console session is looked up in the instance's table, over a worker's link.
    const check = (given: string | IssuedCredentials | undefined) => decide(ctx, presigned, given);
    return isPromise(given) ? given.then(check) : check(given);
  };

  /** Who the request is, from the credential it carries (`given`) or the one it does not need. */
  function decide(ctx: RequestContext, presigned: boolean, given: string | IssuedCredentials | undefined) {
    if (transport) {
      if (transport.clientCert !== 'off') {
        const other = presigned ? 'link' : typeof given === 'object' ? given.authorization : given;
        const byCertificate = certificatePrincipal(auth, ctx, transport, other);
        if (byCertificate !== undefined)
          return isPromise(byCertificate)
            ? byCertificate.then((p) => admit(auth, ctx, p))
            : admit(auth, ctx, byCertificate);
      }
    }
    if (presigned && links)
      return presignedPrincipal(links, ctx).then(({ principal, sha256, issuedAtS }) => {
        ctx.linkSha256 = sha256;
        return admit(auth, ctx, principal, issuedAtS);
      });
    if (typeof given !== 'object') {
      const principal = auth.authenticateNow(given);
      return isPromise(principal) ? principal.then((p) => admit(auth, ctx, p)) : admit(auth, ctx, principal);
    }
    const checked = (p: Principal) => {
      // Re-enabling a principal restores its keys, not sessions opened before it was disabled.
      if (disabledSince(given, p.disabledAtMs)) throw unauthorized();
      return admit(auth, ctx, p);
    };
    try {
      const principal = auth.authenticateNow(given.authorization);
      return isPromise(principal) ? principal.then(checked, sessionEnded) : checked(principal);
    } catch (err) {
      return sessionEnded(err);
    }
  }
}

/**
 * A console session whose key no longer authenticates (revoked, its principal disabled) is asked
 * to sign in again on the console's page, as one with no session is: a Bearer challenge only. The
 * Basic challenge of other 401s would open the browser's own login prompt over the console, and a
 * key typed there is a credential the browser then resends on its own (see cross-site.ts).
 */
function sessionEnded(err: unknown): never {
  if ((err as { code?: unknown }).code === 'unauthorized')
    throw new PolicyError('unauthorized', 'The console session ended (its key no longer works); sign in again.', {
      headers: { 'www-authenticate': 'Bearer realm="arkvory"' },
    });
  throw err;
}

/**
 * The principal of the connection's client certificate when it is the request's credential (no
 * key, Basic password, session or link sent); undefined when another credential is. `require`
 * refuses any request without a verified, unexpired certificate. A refusal is a plain 401; its
 * reason goes to the log.
 */
function certificatePrincipal(
  auth: Authenticator,
  ctx: RequestContext,
  transport: TransportPolicy,
  otherCredential: string | undefined,
): Principal | Promise<Principal> | undefined {
  const peer = peerCertificateOf(ctx.req.socket);
  const problem = certificateProblem(peer, transport);
  const reason = peer.kind === 'none' && transport.clientCert !== 'require' ? undefined : problem;
  const refuse = (why: string): never => refuseCertificate(ctx, why);
  if (reason !== undefined && (transport.clientCert === 'require' || otherCredential === undefined)) refuse(reason);
  if (otherCredential !== undefined || peer.kind !== 'verified') return undefined;
  const outcome = auth.certificatePrincipalNow(peer.sans);
  const principalOf = (o: Awaited<typeof outcome>): Principal => (o.ok ? o.principal : refuse(o.reason));
  return isPromise(outcome) ? outcome.then(principalOf) : principalOf(outcome);
}

/** Why the connection's certificate does not count now; undefined when it is verified and unexpired. */
function certificateProblem(
  peer: ReturnType<typeof peerCertificateOf>,
  transport: TransportPolicy,
): string | undefined {
  if (peer.kind === 'none') return 'no client certificate was sent';
  if (peer.kind === 'unverified') return peer.reason;
  return certificateExpired(peer, transport.clock.wallMs());
}

/**
 * A plain 401; the reason goes to the log only, and as a client fault: anyone can connect without a
 * certificate (or with a self-signed one) as often as they like.
 */
function refuseCertificate(ctx: RequestContext, reason: string): never {
  const fields = { code: 'unauthorized', reason };
  if (ctx.noteFault(401, 'unauthorized')) ctx.faultLine(fields, 'client certificate refused');
  else ctx.log.info(fields, 'client certificate refused');
  throw unauthorized();
}

/**
 * Public routes under the transport policy. Credentials they carry (the /metrics token, the rules
 * service's token, a console session cookie) are refused in clear as any other; in `require` mode
 * every route but the health checks wants a verified certificate (the page, its assets, /metrics).
 */
function checkPublic(ctx: RequestContext, transport: TransportPolicy): undefined {
  if (transport.refusePlainHttpCredentials && carriesCredential(ctx) && sentInClear(ctx, transport.trusted))
    throw new GatewayError('tls_required');
  if (transport.clientCert !== 'require' || ctx.route.startsWith('/health/')) return undefined;
  const problem = certificateProblem(peerCertificateOf(ctx.req.socket), transport);
  if (problem !== undefined) refuseCertificate(ctx, problem);
  return undefined;
}

/**
 * Whether the request carries a link's parameters: it is then judged as that link alone, even with a
 * key beside it (pip or curl sending a `.netrc` entry, a browser its cached Basic credentials), so
 * a link serves the bytes it was made for or nothing, never what that key may read under the name now.
 */
export function carriesLink(ctx: Pick<RequestContext, 'req' | 'url'>): boolean {
  // A request with a key and no query (the common case) builds no URL.
  if (ctx.req.headers.authorization !== undefined && !(ctx.req.url ?? '').includes('?')) return false;
  return hasPresignParams(ctx.url.searchParams);
}

/** An Authorization header (a key, Basic, a token) or the console's session cookie under either name. */
function carriesCredential(ctx: RequestContext): boolean {
  const { authorization, cookie } = ctx.req.headers;
  return (
    authorization !== undefined ||
    readCookie(cookie, SESSION_COOKIE) !== undefined ||
    readCookie(cookie, SECURE_SESSION_COOKIE) !== undefined
  );
}

/**
 * Whether the client sent this request over plain HTTP across a network. Behind a trusted proxy what
 * it says decides (`requestScheme`), also when the proxy reaches us over TLS (the router to an https
 * gateway): the hop that matters is the client's, not the proxy's. Without a word from one, a
 * loopback client's plain HTTP never left the host.
 */
function sentInClear(ctx: RequestContext, trusted: TrustedProxies): boolean {
  const { scheme, fromProxy } = requestScheme(ctx.req, trusted);
  if (fromProxy || scheme === 'https') return scheme === 'http';
  return !isLoopbackAddress(normalizeAddress(ctx.req.socket?.remoteAddress) ?? '');
}

/**
 * The route's access level against the principal's scopes and its grant on `:repo` (cached: at once).
 * A pre-signed link (`linkIssuedAtS`, when it was made) has no grant when the principal's was removed
 * since: 404 as while it was removed, also once it is given again (docs/clients.md).
 */
function admit(
  auth: Authenticator,
  ctx: RequestContext,
  principal: Principal,
  linkIssuedAtS?: number,
): undefined | Promise<void> {
  ctx.principal = principal;
  if (linkIssuedAtS !== undefined) linksIssuedAt.set(ctx, linkIssuedAtS);
  const needsGrant = ctx.access === 'read' || ctx.access === 'write';
  if (!needsGrant) return decide(ctx, principal, undefined);
  const repo = ctx.params.repo;
  if (repo === undefined) throw new Error(`route ${ctx.route} has access "${ctx.access}" but no :repo parameter`);
  const grant =
    linkIssuedAtS === undefined
      ? auth.grantNow(principal.id, repo)
      : auth.grantForLinkNow(principal.id, repo, linkIssuedAtS);
  return isPromise(grant) ? grant.then((g) => decide(ctx, principal, g)) : decide(ctx, principal, grant);
}

/** The auth caches' generation when the request reached the auth gate. */
const generationAtGate = new WeakMap<RequestContext, number>();

/**
 * Whether the auth caches were cleared since the request reached the auth gate: a change that may
 * revoke it came meanwhile, possibly before a running transfer could be asked about it.
 */
export function changedSinceAuthorized(auth: Authenticator, ctx: RequestContext): boolean {
  const at = generationAtGate.get(ctx);
  return at === undefined || at !== auth.cacheGeneration;
}

/** When the pre-signed link a request was admitted with was made (unix seconds, the database's clock). */
const linksIssuedAt = new WeakMap<RequestContext, number>();

/**
 * Asks again whether a request the auth gate admitted may go on (a download that is still running):
 * throws the gate's refusal (401, 403, 404) once its key was revoked or re-scoped, its principal
 * disabled (also when enabled again since: `keyStandingNow`), its certificate unbound, or its grant
 * removed or lowered below what the route needs (for a pre-signed link: removed since the link was
 * made, even if given again). Not a second authentication: what a credential carried when it was
 * checked (an expiry, a link's lifetime, the secret) is not asked again, since it was known when the
 * request began. Answers at once from the trusted cache, else after the database's answer; throws
 * 503 `unavailable` when that cannot be reached (the caller keeps the transfer and asks again).
 */
export function requestStillAuthorized(auth: Authenticator, ctx: RequestContext): undefined | Promise<void> {
  const principal = ctx.principal;
  if (principal === undefined || ctx.access === 'public') return undefined;
  const withScopes = (scopes: ReadonlySet<Scope> | undefined) => {
    if (scopes === undefined) throw unauthorized();
    return stillGranted(auth, ctx, principal, scopes);
  };
  if (principal.keyId.startsWith('cert:')) {
    const peer = peerCertificateOf(ctx.req.socket);
    if (peer.kind !== 'verified') throw unauthorized();
    const outcome = auth.certificatePrincipalNow(peer.sans);
    const scopesOf = (o: Awaited<typeof outcome>) =>
      withScopes(
        o.ok && o.principal.id === principal.id && o.principal.disabledAtMs === principal.disabledAtMs
          ? o.principal.scopes
          : undefined,
      );
    return isPromise(outcome) ? outcome.then(scopesOf) : scopesOf(outcome);
  }
  const scopes = auth.keyStandingNow(principal.keyId, principal.disabledAtMs);
  return isPromise(scopes) ? scopes.then(withScopes) : withScopes(scopes);
}

function stillGranted(
  auth: Authenticator,
  ctx: RequestContext,
  principal: Principal,
  scopes: ReadonlySet<Scope>,
): undefined | Promise<void> {
  const current = { ...principal, scopes };
  if (ctx.access !== 'read' && ctx.access !== 'write') return decide(ctx, current, undefined);
  const repo = ctx.params.repo!;
  const issuedAtS = linksIssuedAt.get(ctx);
  const grant =
    issuedAtS === undefined ? auth.grantNow(principal.id, repo) : auth.grantForLinkNow(principal.id, repo, issuedAtS);
  return isPromise(grant) ? grant.then((g) => decide(ctx, current, g)) : decide(ctx, current, grant);
}

function decide(ctx: RequestContext, principal: Principal, grant: Permission | undefined): undefined {
  const decision = authorize(ctx.access, principal.scopes, grant);
  if (!decision.allow) throw new PolicyError(decision.code);
  return undefined;
}

/** A pre-signed link opens GET/HEAD of one content route only; anything else with its parameters is a 401. */
function presignedPrincipal(links: PresignedLinks | undefined, ctx: RequestContext) {
  if (!links) return Promise.reject(unauthorized());
  const method = ctx.req.method;
  if ((method !== 'GET' && method !== 'HEAD') || ctx.access !== 'read' || !ctx.route.endsWith('/content'))
    return Promise.reject(unauthorized());
  return links.authenticate(ctx.url.pathname, ctx.url.searchParams);
}
