/**
 * Global setup of the mutation suite (vitest.mutation.config.ts): only Redis, which the Redis
 * counter store's conformance tests need. The unit tests need nothing, and the embedded PostgreSQL
 * and the S3 hub of the full setup would only slow every mutation run's start.
 */
import type { TestProject } from 'vitest/node';
import { startRedis } from './global-setup.ts';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const given = process.env.ARKVORY_TEST_REDIS_URL;
  const redis = given ? undefined : await startRedis();
  project.provide('redisUrl', given ?? redis!.url);
  return async () => {
    redis?.child.kill('SIGTERM');
  };
}
