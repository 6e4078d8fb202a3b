import { defineConfig } from 'vitest/config';

/**
 * The tests the mutation suite runs (stryker.config.mjs): the unit tests of the mutated modules and
 * the counter-store conformance suite on a real Redis, without the full global setup (no PostgreSQL,
 * no S3 hub). Stryker narrows each run to the files that import the mutated module.
 */
export default defineConfig({
  test: {
    globalSetup: ['test/support/mutation-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 90_000,
    include: ['{lib,proxy,policy,storage-adapter}/**/*.test.ts', 'policy/rate-limit/counter-store.int.test.ts'],
    exclude: [
      '**/node_modules/**',
      '{lib,proxy,storage-adapter}/**/*.int.test.ts',
      'policy/!(rate-limit)/**/*.int.test.ts',
      'policy/rate-limit/!(counter-store).int.test.ts',
    ],
  },
});
