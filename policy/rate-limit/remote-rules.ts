/**
 * The Phase 3 tier (spec 3.1, 3.3): rules from an external rules service, evaluated before every
 * local tier, cached in memory, failing open to the local tiers.
 *
 * - Cache: keyed by the shape the service said its answer depended on (`varies_by`: per principal,
 *   per repository, … or nothing), each entry kept for the service's `ttl_s` bounded by `maxTtlMs`.
 *   A warm lookup is synchronous: no I/O, no promise on the hot path.
 * - Miss (cold or expired): the check waits for the service, at most `timeoutMs`. Spec 3.1 says the
 *   service "returns the rules for that request", so the first request of a shape is decided with
 *   them rather than with the local rules (a per-customer rule applies from its first request).
 *   Concurrent misses for the same identifier share one request (single flight).
 * - Failure (unreachable, error status, slower than `timeoutMs`, an answer that fails validation):
 *   `undefined`, i.e. the local tiers decide (file, published, defaults); counted by result and
 *   logged at most once per `logIntervalMs`. After `failureThreshold` consecutive failures, or one
 *   timeout, the circuit opens for `openMs`: misses then skip the service entirely (added cost
 *   zero), and one probe per `openMs` tries again. So a request waits at most one timeout in all.
 *   A 503 or 429 with Retry-After opens it at once, for that long if longer than `openMs` (at most
 *   `MAX_RETRY_AFTER_MS`): every gateway process leaves a service that asked for it alone.
 * Worst-case propagation of a change made in the service: `maxTtlMs` + `timeoutMs` (an entry read
 * just before the change lives its full TTL; the next miss fetches the new rules).
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import { formatProblem } from './errors.ts';
import { valueOf, type Identifier } from './match.ts';
import { noRulesServiceMetrics, type RulesServiceMetrics, type RulesServiceResult } from './metrics.ts';
import type { TierAnswer, TierSource } from './rule-tiers.ts';
import { buildRulesQuery, validateRulesAnswer, type RulesQuery } from './rules-answer.ts';
import { ruleFromSpec, type AvailableLimiters, type Rule } from './rules.ts';
import { createCircuitBreaker, type BreakerState } from './circuit-breaker.ts';
import { BoundedLru } from '../../lib/bounded-lru.ts';

/** Why a call to the rules service produced no usable answer. */
export class RulesServiceError extends Error {
  override readonly name = 'RulesServiceError';
  readonly kind: 'timeout' | 'error' | 'invalid';
  /** How long the service asked to be left alone (a 503's or 429's Retry-After), if it did. */
  readonly retryAfterMs: number | undefined;
  constructor(
    kind: 'timeout' | 'error' | 'invalid',
    message: string,
    options?: { cause?: unknown; retryAfterMs?: number | undefined },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.kind = kind;
    this.retryAfterMs = options?.retryAfterMs;
  }
}

/** The longest a Retry-After keeps the circuit open: past it the service is asked again anyway. */
export const MAX_RETRY_AFTER_MS = 60_000;

/** Sends one query; resolves with the decoded JSON body of a 200, rejects with `RulesServiceError`. */
export type RulesTransport = (query: RulesQuery, signal: AbortSignal) => Promise<unknown>;

export interface RemoteRulesDeps {
  /** This caller's service name (ARKVORY_SERVICE_NAME); the service scopes its rules by it. */
  serviceName: string;
  available: AvailableLimiters;
  transport: RulesTransport;
  clock: Clock;
  log: Logger;
  metrics?: RulesServiceMetrics;
  /** Longest a check waits for the service. */
  timeoutMs: number;
  /** Upper bound on the TTL the service returns. */
  maxTtlMs: number;
  /** Consecutive failures that open the circuit. Default 3. */
  failureThreshold?: number;
  /** How long an open circuit skips the service. Default 5 s. */
  openMs?: number;
  /** Cached answers kept at most (oldest evicted first). Default 100 000. */
  maxEntries?: number;
  /**
   * Their rules' total JSON length kept at most (oldest evicted first). Default 64 MiB. An answer may
   * be up to 1 MiB (rules-service-client.ts), mostly descriptions: by count alone, a service answering
   * such per principal filled 100 000 entries of it.
   */
  maxBytes?: number;
  /** Shapes (distinct `varies_by` lists) remembered per limiter. Default 16. */
  maxShapes?: number;
  /** Failures are logged at most once per this interval. Default 10 s. */
  logIntervalMs?: number;
}

interface Entry {
  readonly rules: readonly Rule[];
  readonly expiresMs: number;
}

interface Outcome {
  readonly answer: TierAnswer;
  readonly result: RulesServiceResult;
}

export interface RemoteRules extends TierSource {
  /** Circuit state and cache size, for readiness and tests. */
  status(): { circuit: BreakerState; entries: number; lastError: string | undefined };
}

/**
 * The cache key of `identifier` under one shape: limiter, the shape, and the shape's values, each
 * length-prefixed so no value can forge a separator; a missing property is `-`.
 */
export function shapeKey(limiter: string, shape: readonly string[], identifier: Identifier): string {
  let key = `${limiter}\0${shape.join(',')}`;
  for (const property of shape) {
    const value = valueOf(identifier, property);
    key += value === undefined ? '\0-' : `\0${value.length}:${value}`;
  }
  return key;
}

export function createRemoteRules(deps: RemoteRulesDeps): RemoteRules {
  const { serviceName, available, transport, clock, log, timeoutMs, maxTtlMs } = deps;
  const metrics = deps.metrics ?? noRulesServiceMetrics;
  const maxShapes = deps.maxShapes ?? 16;
  const logIntervalMs = deps.logIntervalMs ?? 10_000;
  const breaker = createCircuitBreaker({ threshold: deps.failureThreshold ?? 3, openMs: deps.openMs ?? 5000 });
  // Read with peek (no refresh): the oldest answer goes first, as its TTL would have it.
  const cache = new BoundedLru<string, Entry>({
    maxEntries: deps.maxEntries ?? 100_000,
    maxBytes: deps.maxBytes ?? 64 * 1024 * 1024,
  });
  /** Per limiter, the shapes answers so far said they depend on. */
  const shapes = new Map<string, string[][]>();
  const inflight = new Map<string, Promise<Outcome>>();
  let lastLogMs = -Infinity;
  let suppressed = 0;
  let lastError: string | undefined;

  const reportFailure = (limiter: string, result: RulesServiceResult, err: unknown, problems?: string[]) => {
    lastError = err instanceof Error ? err.message : String(err);
    const nowMs = clock.monotonicMs();
    if (nowMs - lastLogMs < logIntervalMs) {
      suppressed++;
      return;
    }
    lastLogMs = nowMs;
    log.warn(
      {
        limiter,
        result,
        code: `rules_service_${result}`,
        err,
        ...(problems ? { problems } : {}),
        suppressed,
        circuit: breaker.state,
      },
      'rules service answer unusable; local rate-limit rules apply',
    );
    suppressed = 0;
  };

  const remember = (
    limiter: string,
    shape: string[],
    identifier: Identifier,
    rules: readonly Rule[],
    bytes: number,
    ttlMs: number,
  ) => {
    if (ttlMs <= 0) return;
    let known = shapes.get(limiter);
    if (!known) shapes.set(limiter, (known = []));
    const id = shape.join(',');
    if (!known.some((s) => s.join(',') === id)) {
      if (known.length >= maxShapes) return; // a service inventing shapes per request: answer, don't cache
      known.push(shape);
    }
    const key = shapeKey(limiter, shape, identifier);
    cache.set(key, { rules, expiresMs: clock.monotonicMs() + ttlMs }, key.length + bytes);
  };

  const fetchRules = async (limiter: string, identifier: Identifier): Promise<Outcome> => {
    let timer: NodeJS.Timeout | undefined;
    const abort = new AbortController();
    try {
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          reject(new RulesServiceError('timeout', `the rules service did not answer within ${timeoutMs} ms`));
          abort.abort(); // frees the connection; the late answer is dropped
        }, timeoutMs);
      });
      const sent = transport(buildRulesQuery(serviceName, limiter, identifier), abort.signal);
      sent.catch(() => {}); // after a timeout its rejection (aborted) is expected and ignored
      const body = await Promise.race([sent, timedOut]);
      const { answer, problems } = validateRulesAnswer(body, limiter, available);
      if (!answer) {
        breaker.failure(clock.monotonicMs());
        reportFailure(
          limiter,
          'invalid',
          new RulesServiceError('invalid', 'the rules service answer failed validation'),
          problems.map(formatProblem),
        );
        return { answer: undefined, result: 'invalid' };
      }
      if (breaker.state !== 'closed' || lastError !== undefined) log.info({ limiter }, 'rules service answering again');
      breaker.success();
      lastError = undefined;
      const rules = answer.rules.map(ruleFromSpec);
      const bytes = answer.rules.length ? JSON.stringify(answer.rules).length : 0;
      remember(limiter, answer.varies_by, identifier, rules, bytes, Math.min(answer.ttl_s * 1000, maxTtlMs));
      return { answer: rules, result: 'miss' };
    } catch (err) {
      const result: RulesServiceResult = err instanceof RulesServiceError ? err.kind : 'error';
      // A timeout opens the circuit at once: the lookups after it (the request's other limiters,
      // the next requests) skip the service, so a hung service costs a request one timeout at most.
      const retryAfterMs = err instanceof RulesServiceError ? err.retryAfterMs : undefined;
      breaker.failure(
        clock.monotonicMs(),
        result === 'timeout' || retryAfterMs !== undefined,
        Math.min(retryAfterMs ?? 0, MAX_RETRY_AFTER_MS),
      );
      reportFailure(limiter, result, err);
      return { answer: undefined, result };
    } finally {
      clearTimeout(timer);
    }
  };

  return {
    name: 'rules_service',
    rulesFor(limiter, identifier) {
      const known = shapes.get(limiter);
      if (known) {
        const nowMs = clock.monotonicMs();
        for (const shape of known) {
          const key = shapeKey(limiter, shape, identifier);
          const entry = cache.peek(key);
          if (!entry) continue;
          if (entry.expiresMs > nowMs) {
            metrics.request(limiter, 'hit');
            return entry.rules;
          }
          cache.delete(key);
        }
      }
      const flightKey = `${limiter}\0${JSON.stringify(identifier)}`;
      let flight = inflight.get(flightKey);
      if (!flight) {
        if (!breaker.allow(clock.monotonicMs())) {
          metrics.request(limiter, 'circuit_open');
          return undefined;
        }
        flight = fetchRules(limiter, identifier).finally(() => inflight.delete(flightKey));
        inflight.set(flightKey, flight);
      }
      return flight.then((outcome) => {
        metrics.request(limiter, outcome.result);
        return outcome.answer;
      });
    },
    status() {
      return { circuit: breaker.state, entries: cache.size, lastError };
    },
  };
}
