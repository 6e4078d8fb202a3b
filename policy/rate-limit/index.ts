/**
 * Public surface of the rate-limit engine (spec: unified rate limiting, Phases 1–3). `proxy/` builds
 * limiters from these factories; everything else in this folder is internal.
 *
 * Glossary (one word per idea, as in the spec):
 * - limiter: a named check (`gateway_request`, `auth_failure`, `transfer_bytes`) declared in
 *   available_limiters.yaml with the properties its identifiers carry.
 * - rule: what a limiter evaluates (rules.ts; the shape is rule.schema.json).
 * - tier: a level of precedence among rules. A limiter's stored document has three
 *   (file_rules > published_rules > default_rules, spec 2.5); the rules service's answer is the tier
 *   above them (spec 3.1). A `TierSource` answers for its tiers (rule-tiers.ts).
 * - override: what a higher tier's rule does to a lower one of the same name: it replaces it. The
 *   rules service's per-principal and per-repository rule sets are called overrides for that reason.
 * - counter store (`CounterStore`, counter-store.ts): where counters and bans live (memory or Redis). Not
 *   to be confused with the rule document store (`RuleDocumentStore`), nor with the artifact store
 *   of storage-adapter/ (`ArtifactStore`).
 */
export {
  RATE_LIMIT_ERRORS,
  RateLimitError,
  formatPath,
  formatProblem,
  type RateLimitErrorCode,
  type RuleProblem,
} from './errors.ts';
export type { RateLimitInfo, RateLimitResult, RuleEvaluation, RuleResult } from './evaluate.ts';
export { createLimiter, type Limiter, type LimiterDefinition, type LimiterDeps } from './limiter.ts';
export { ANONYMOUS, type Identifier } from './match.ts';
export { createMemoryCounterStore } from './memory-counter-store.ts';
export {
  METRIC_NAMES,
  RULES_SERVICE_METRIC,
  createRateLimitMetrics,
  createRulesServiceMetrics,
  type RateLimitMetrics,
  type RulesServiceMetrics,
  type RulesServiceResult,
} from './metrics.ts';
export { createPgRuleDocuments } from './pg-rule-documents.ts';
export { createRedisRuleDocuments } from './redis-rule-documents.ts';
export { createRedisCounterStore } from './redis-counter-store.ts';
export { parseRedisTarget, redactRedisTarget, ruleDocumentsPrefix, type RedisTarget } from './redis-target.ts';
export type { RuleDocumentStore } from './rule-documents.ts';
export { tieredRules, type TierSource } from './rule-tiers.ts';
export { createRemoteRules, RulesServiceError, type RemoteRules, type RulesTransport } from './remote-rules.ts';
export { createRulesServiceClient, RULES_QUERY_PATH } from './rules-service-client.ts';
export {
  SERVICE_NAME_PATTERN,
  buildRulesQuery,
  validateRulesAnswer,
  validateRulesQuery,
  type RulesAnswer,
  type RulesQuery,
} from './rules-answer.ts';
export { createRuleRegistry, type LimiterView, type RuleRegistry } from './rule-registry.ts';
export {
  defineRule,
  mergeTiers,
  TIERS,
  validateRuleList,
  type Action,
  type AvailableLimiters,
  type LimiterRules,
  type MatchValue,
  type Rule,
  type RuleSpec,
  type Tier,
} from './rules.ts';
export type { CounterStore } from './counter-store.ts';
export { parseAvailableLimiters, parseRateLimits } from './yaml-source.ts';
