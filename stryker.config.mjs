// @ts-check
/**
 * The mutation suite (docs/testing.md): small bugs planted one at a time in the pure policy core
 * and the HTTP semantics; a planted bug that every test lets through is a surviving mutant. Run it
 * with `npm run test:mutation` (incremental: a rerun mutates only what changed since the last one).
 * @type {import('@stryker-mutator/api/core').PartialStrykerOptions}
 */
export default {
  mutate: [
    'policy/bandwidth/token-bucket.ts',
    'policy/bandwidth/bandwidth-governor.ts',
    'policy/admission/admission-queue.ts',
    'policy/rate-limit/evaluate.ts',
    'policy/rate-limit/memory-counter-store.ts',
    'policy/rate-limit/redis-counter-store.ts',
    'policy/lease/lease-permit.ts',
    'policy/auth/authorize.ts',
    'policy/auth/presign-signature.ts',
    'storage-adapter/range.ts',
    'storage-adapter/slice-cache/fill.ts',
    'proxy/content/conditional.ts',
    'lib/ip-address.ts',
    'lib/bounded-lru.ts',
    'lib/log-budget.ts',
    'policy/auth/basic-credentials.ts',
    'policy/auth/key-format.ts',
    'policy/auth/client-certificate.ts',
    'policy/quota/quota-check.ts',
    'proxy/router/route-class.ts',
    'proxy/router/hop-by-hop.ts',
    'proxy/router/forwarded.ts',
    'storage-adapter/multipart/completion-plan.ts',
    'storage-adapter/slice-cache/slice-index.ts',
    'policy/rate-limit/keys.ts',
    'proxy/config/variable-values.ts',
    'proxy/content/response.ts',
    'proxy/content/security.ts',
    'proxy/content/digest.ts',
    'proxy/store-health/store-health.ts',
    'policy/rate-limit/rules-answer.ts',
    'policy/rate-limit/document-changes.ts',
  ],
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts', related: true },
  checkers: ['typescript'],
  tsconfigFile: 'tsconfig.mutation.json',
  typescriptChecker: { prioritizePerformanceOverAccuracy: true },
  coverageAnalysis: 'perTest',
  // Two cores, shared: one test runner per core at most.
  concurrency: 2,
  incremental: true,
  incrementalFile: 'reports/mutation/stryker-incremental.json',
  // progress-append-only: a line every few seconds, readable in CI logs too.
  reporters: ['clear-text', 'progress-append-only', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  clearTextReporter: { allowColor: false, logTests: false, reportScoreTable: true },
  thresholds: { high: 95, low: 90, break: 90 },
  tempDirName: '.stryker-tmp',
  cleanTempDir: 'always',
  ignorePatterns: ['reports', 'data', 'test-results', '.prof'],
};
