/**
 * The rate-limit gates of a request (spec: unified rate limiting):
 *  - `createRateLimitGate`: the `gateway_request` check on every request (after auth) plus the
 *    `transfer_bytes` peek before and check after the body moved;
 *  - `guardAuthGate`: wraps the auth gate so failed authentications count in `auth_failure`
 *    (a banned address gets 429 before its key is even looked at; a success clears the failures).
 */
import { byteCounts } from '../server/http2-messages.ts';
import type { Clock } from '../../policy/clock.ts';
import { PolicyError } from '../../policy/errors.ts';
import type { Identifier, Limiter, RateLimitInfo, RateLimitResult } from '../../policy/rate-limit/index.ts';
import { addEarlyHeader } from '../server/gateway-response.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';
import { CLIENT_FAULT_LOG, LogBudget } from '../../lib/log-budget.ts';
import { isPromise } from '../../lib/maybe-promise.ts';
import { carriesLink } from './auth-gate.ts';
import { isStaleCredential } from '../../policy/auth/authenticator.ts';
import type { TrustedProxies } from '../router/forwarded.ts';
import { BanIdentities, FORWARDER_SHARE } from './ban-identity.ts';
import { DEFAULT_IPV6_PREFIX_LENGTH, NO_TRUSTED_PROXIES, requestIdentifier } from './request-identity.ts';

/**
 * IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy` names the
 * rule with its quota `q` and window `w`; `RateLimit` gives what is left `r` and seconds to reset `t`.
 */
export function rateLimitHeaders(result: RateLimitResult, nowMs: number): Record<string, string> {
  if (!result.rule || !result.info) return {};
  return headersOf(result.rule, result.info, result.action, nowMs);
}

function headersOf(
  rule: { readonly name: string },
  info: RateLimitInfo,
  action: RateLimitResult['action'],
  nowMs: number,
): Record<string, string> {
  const resetS = Math.max(0, Math.ceil((info.resetAtMs - nowMs) / 1000));
  const name = rule.name;
  const headers: Record<string, string> = {
    'ratelimit-policy': policyHeader(rule, info.resolvedLimit, info.resolvedPeriodS),
    ratelimit: `"${name}";r=${Math.floor(info.remaining)};t=${resetS}`,
  };
  if (action === 'block') headers['retry-after'] = String(Math.max(1, resetS));
  return headers;
}

/** `RateLimit-Policy` changes only with the rule's resolved numbers: formatted once per rule and numbers. */
const policyHeaders = new WeakMap<object, { limit: number; periodS: number; text: string }>();

function policyHeader(rule: { readonly name: string }, limit: number, periodS: number): string {
  const cached = policyHeaders.get(rule);
  if (cached && cached.limit === limit && cached.periodS === periodS) return cached.text;
  const text = `"${rule.name}";q=${Math.floor(limit)};w=${Math.max(1, Math.round(periodS))}`;
  policyHeaders.set(rule, { limit, periodS, text });
  return text;
}

/**
 * Lines of bans (enforced or shadow): 5 a minute for the bans of addresses reached directly or
 * named by a trusted proxy, and 5 for each untrusted peer that names clients itself (64 such peers
 * at most, any beyond them share one budget): each address it claims in `X-Forwarded-For` is a ban
 * key of its own, so it could mint a ban, and its line, every 21 bad requests (the shipped rule)
 * until its own key is banned (`FORWARDER_SHARE`), and again after each such ban. Past that a ban's line goes to debug and the next one written says how many
 * were left out (`suppressed`); the bans themselves are unchanged.
 */
export const BAN_LINES = CLIENT_FAULT_LOG;

/**
 * Lines of exceeded shadow (`log`) rules: 5 a minute per rule, the rest at debug, the next one written
 * saying how many were left out (`suppressed`). Every excess is still metered
 * (`arkvory_rate_limit_rule_evaluations_total`).
 */
export const SHADOW_LINES = CLIENT_FAULT_LOG;
const SHADOW_EXCEEDED = 'shadow rate limit exceeded';

/** Seconds a client refused because a fail-closed rule's store failed waits: a reconnect is not predictable. */
export const STORE_ERROR_RETRY_AFTER_S = 1;

/**
 * A block as an error: 429 `rate_limited` with the RateLimit headers when a rule was exceeded;
 * 503 `rate_limit_unavailable` when the store failed and a rule fails closed (nothing was over its
 * limit, and no count exists to report).
 */
function blocked(result: RateLimitResult, nowMs: number, message?: string): PolicyError {
  if (result.error !== undefined)
    return new PolicyError('rate_limit_unavailable', undefined, {
      headers: { 'retry-after': String(STORE_ERROR_RETRY_AFTER_S) },
      cause: result.error,
    });
  return new PolicyError('rate_limited', message, { headers: rateLimitHeaders(result, nowMs) });
}

export function createRateLimitGate(deps: {
  request: Limiter;
  transferBytes: Limiter;
  clock: Clock;
  trusted?: TrustedProxies;
  /** How much of an IPv6 client address its `ip` is (ARKVORY_RATE_LIMIT_IPV6_PREFIX_LENGTH). */
  ipv6PrefixLength?: number;
}): Gate {
  const { request, transferBytes, clock } = deps;
  const trusted = deps.trusted ?? NO_TRUSTED_PROXIES;
  const ipv6PrefixLength = deps.ipv6PrefixLength ?? DEFAULT_IPV6_PREFIX_LENGTH;
  // Per rule: once a shadow rule is exceeded, every request it matches exceeds it again.
  const shadowLines = new LogBudget(SHADOW_LINES);
  const counted = (ctx: RequestContext, identifier: Identifier, result: RateLimitResult): undefined | Promise<void> => {
    // The rule that decided, on the request's rate-limit span (proxy/tracing/traced-gate.ts).
    ctx.trace?.gateSpan?.setAttributes({
      'arkvory.rate_limit.limiter': request.name,
      'arkvory.rate_limit.rule': result.rule?.name ?? '',
      'arkvory.rate_limit.action': result.action,
    });
    if (result.action === 'block') throw blocked(result, clock.wallMs());
    if (result.exceeded) {
      const fields = { limiter: request.name, rule: result.rule?.name, code: 'rate_limited', shadow: true };
      const turn = shadowLines.take(result.rule?.name ?? '', clock.monotonicMs());
      if (turn.write)
        ctx.log.info(turn.suppressed > 0 ? { ...fields, suppressed: turn.suppressed } : fields, SHADOW_EXCEEDED);
      else if (ctx.log.isLevelEnabled('debug')) ctx.log.debug(fields, SHADOW_EXCEEDED);
    }
    // What the enforcing rules say, even when an exceeded shadow rule is the result's rule: a
    // shadow rule changes nothing a client sees.
    if (result.enforcing) {
      const headers = headersOf(result.enforcing.rule, result.enforcing.info, result.action, clock.wallMs());
      for (const name in headers) addEarlyHeader(ctx.res, name, headers[name]!);
    }
    if (identifier.request_type === 'health') return;

    const transferId: Identifier = {
      ...identifier,
      direction: identifier.method === 'GET' || identifier.method === 'HEAD' ? 'download' : 'upload',
    };
    const peek = transferBytes.peekNow(transferId);
    return isPromise(peek) ? peek.then((p) => peeked(ctx, transferId, p)) : peeked(ctx, transferId, peek);
  };
  const peeked = (ctx: RequestContext, transferId: Identifier, peek: RateLimitResult): undefined => {
    if (peek.action === 'block') throw blocked(peek, clock.wallMs(), 'Transfer volume quota exhausted; retry later.');
    // No transfer rule applies: nothing to count afterwards. A peek that failed open says nothing of
    // the rules, so the bytes are still offered to the check at the end, when the store may be back.
    if (peek.evaluations.length === 0 && peek.error === undefined) return;
    const moved = byteCounts(ctx.req, ctx.res);
    ctx.res.once('close', () => {
      const bytes = moved.written() + moved.read();
      if (bytes > 0) void transferBytes.check(transferId, { cost: bytes });
    });
  };
  return (ctx) => {
    const identifier = requestIdentifier(ctx, trusted, ipv6PrefixLength);
    const result = request.checkNow(identifier);
    return isPromise(result) ? result.then((r) => counted(ctx, identifier, r)) : counted(ctx, identifier, result);
  };
}

/**
 * Whether a refused request tried a credential that can be guessed: an `Authorization` header, or a
 * pre-signed link's parameters sent by anything but a browser on behalf of another site. A request
 * with none (a challenge-first client's first request, a console session that ended) is not a
 * failed attempt; counting it let any web page get its visitors' address banned, all its users
 * with it, with credential-less requests the browser sends for it. A page cannot choose the
 * `Authorization` header of another site's request (no 401 offers such a request the Basic
 * challenge a browser would answer with a URL's credentials: challenge.ts), and a link's HMAC is
 * not guessed, so a cross-site link that fails (expired, say) is not counted either, even when the
 * browser adds Basic credentials it cached: a request with a link's parameters is judged as the
 * link (`carriesLink`). A stale credential (a revoked key with its right secret, an expired link
 * whose signature holds: `isStaleCredential`) is no guess either and is not counted (`failed`).
 */
function triedCredential(ctx: RequestContext): boolean {
  const { headers } = ctx.req;
  const link = carriesLink(ctx);
  if (headers.authorization !== undefined && !link) return true;
  const site = headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') return false;
  return link;
}

/** One ban key and what `auth_failure` said of it before authentication. */
interface Judged {
  readonly identifier: Identifier;
  readonly before: RateLimitResult;
}

/** The key a request is judged by, and behind an untrusted forwarding peer that peer's own key too. */
interface Subject {
  readonly client: Judged;
  readonly forwarder: Judged | undefined;
}

/**
 * Counts failed authentications by address in `auth_failure` (keyed by `banIdentity`: an IPv6
 * client by its prefix, a client behind an untrusted forwarding peer together with that peer, a
 * trusted proxy's own address never). A banned (or over-limit) address is refused with 429 before
 * authentication (Retry-After from the ban's end); a 401 counts one failure when the request tried a
 * credential (`triedCredential`), and the failure that starts a ban (enforced or shadow) is logged,
 * within `BAN_LINES`. Behind an untrusted forwarding peer the peer's own key is charged
 * `FORWARDER_SHARE` of each failure too, and a request is refused while either key is banned. A
 * success clears the client's counters and bans, shadow bans included (spec 1.5: a successful login
 * discards the failures before it), never its peer's (one client's success does not absolve the
 * others the peer named); the clear is skipped when the peek saw no state at all, so a clean address
 * costs no write.
 */
export function guardAuthGate(
  authGate: Gate,
  authFailure: Limiter,
  clock: Clock,
  trusted: TrustedProxies = NO_TRUSTED_PROXIES,
  options: { ipv6PrefixLength?: number; onUntrustedForwarder?: (peer: string) => void } = {},
): Gate {
  const identities = new BanIdentities(trusted, options.ipv6PrefixLength ?? 64);
  // Two budgets: the peers' kinds can never crowd the real addresses' one out of its slot.
  const banLines = new LogBudget(BAN_LINES);
  const forwardedBanLines = new LogBudget(BAN_LINES);
  /** Logs the bans (enforced or shadow) that `result` starts, not every failure during one. */
  const logNewBans = (ctx: RequestContext, judged: Judged, result: RateLimitResult, peer: string | undefined) => {
    const wasBanned = new Set(judged.before.evaluations.filter((e) => e.result === 'banned').map((e) => e.rule.name));
    const banned = result.evaluations.filter((e) => e.result === 'banned' && !wasBanned.has(e.rule.name));
    if (banned.length === 0) return;
    const shadow = banned.every((e) => e.rule.action === 'log');
    const fields = {
      limiter: authFailure.name,
      rules: banned.map((e) => e.rule.name),
      ip: judged.identifier.ip,
      shadow,
      code: 'rate_limited',
      retryAfterS: Math.max(1, Math.ceil(((result.info?.resetAtMs ?? clock.wallMs()) - clock.wallMs()) / 1000)),
    };
    const msg = shadow
      ? 'address would be banned after failed authentications (shadow rule)'
      : 'address banned after failed authentications';
    const nowMs = clock.monotonicMs();
    const turn = peer === undefined ? banLines.take('ban', nowMs) : forwardedBanLines.take(peer, nowMs);
    if (turn.write) ctx.log.warn(turn.suppressed > 0 ? { ...fields, suppressed: turn.suppressed } : fields, msg);
    else if (ctx.log.isLevelEnabled('debug')) ctx.log.debug(fields, msg);
  };
  const failed = async (ctx: RequestContext, subject: Subject, err: unknown, peer: string | undefined) => {
    // A stale credential (revoked key, expired link: `staleCredential`) is no guess and never counts.
    if ((err as { code?: unknown }).code === 'unauthorized' && triedCredential(ctx) && !isStaleCredential(err)) {
      const { client, forwarder } = subject;
      const [result, forwarderResult] = await Promise.all([
        authFailure.check(client.identifier),
        forwarder && authFailure.check(forwarder.identifier, { cost: FORWARDER_SHARE }),
      ]);
      logNewBans(ctx, client, result, peer);
      if (forwarder && forwarderResult) logNewBans(ctx, forwarder, forwarderResult, peer);
    }
    throw err;
  };
  const passed = (ctx: RequestContext, { client }: Subject): undefined | Promise<void> => {
    const hadState = client.before.evaluations.some((e) => e.result !== 'allow' || e.count > 0);
    if (ctx.principal && hadState) return authFailure.clear(client.identifier);
    return undefined;
  };
  const guarded = (ctx: RequestContext, subject: Subject, peer: string | undefined): undefined | Promise<void> => {
    for (const judged of [subject.client, subject.forwarder])
      if (judged?.before.action === 'block')
        throw blocked(judged.before, clock.wallMs(), 'Too many failed authentications from this address; retry later.');
    let pending: undefined | Promise<void>;
    try {
      pending = authGate(ctx);
    } catch (err) {
      return failed(ctx, subject, err, peer);
    }
    if (pending)
      return pending.then(
        () => passed(ctx, subject),
        (err: unknown) => failed(ctx, subject, err, peer),
      );
    return passed(ctx, subject);
  };
  const peek = (identifier: Identifier) => authFailure.peekNow(identifier, { cost: 0 });
  return (ctx) => {
    if (ctx.access === 'public') return authGate(ctx);
    // Keyed as ban-identity.ts says: IPv6 by prefix, never a trusted proxy's own address.
    const who = identities.of(ctx.req.socket.remoteAddress, ctx.req.headers);
    if (who.untrustedForwarder !== undefined) options.onUntrustedForwarder?.(who.untrustedForwarder);
    if (who.key === undefined) return authGate(ctx);
    // Behind an untrusted forwarder the client named is the sender's to choose, and so is each ban's
    // line: such a peer spends a budget of its own, never the one of the bans of real addresses.
    const peer = who.untrustedForwarder;
    const identifier: Identifier = { ip: who.key };
    const before = peek(identifier);
    if (who.forwarderKey === undefined) {
      const judge = (b: RateLimitResult) =>
        guarded(ctx, { client: { identifier, before: b }, forwarder: undefined }, peer);
      return isPromise(before) ? before.then(judge) : judge(before);
    }
    const forwarderIdentifier: Identifier = { ip: who.forwarderKey };
    const forwarderBefore = peek(forwarderIdentifier);
    const judge = (b: RateLimitResult, fb: RateLimitResult) =>
      guarded(
        ctx,
        {
          client: { identifier, before: b },
          forwarder: { identifier: forwarderIdentifier, before: fb },
        },
        peer,
      );
    return isPromise(before) || isPromise(forwarderBefore)
      ? Promise.all([before, forwarderBefore]).then(([b, fb]) => judge(b, fb))
      : judge(before, forwarderBefore);
  };
}
