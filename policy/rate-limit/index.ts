/**
 * Public surface of the rate-limit engine (spec: unified rate limiting, Phases 1–2). `proxy/` builds
 * limiters from these factories; everything else in this folder is internal.
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
export { createMemoryStore } from './memory-store.ts';
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
export { createRedisStore } from './redis-store.ts';
export { parseRedisTarget, redactRedisTarget, ruleDocumentsPrefix, type RedisTarget } from './redis-target.ts';
export type { RuleDocumentStore } from './rule-documents.ts';
export { layeredRules, type RuleLayer } from './rule-provider.ts';
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
export type { CounterStore } from './store.ts';
export { parseAvailableLimiters, parseRateLimits } from './yaml-source.ts';
