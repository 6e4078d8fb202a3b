/**
 * Global setup of the mutation suite (vitest.mutation.config.ts): only Redis, which the Redis
 * counter store's conformance tests need. The unit tests need nothing, and the embedded PostgreSQL
 * and the S3 hub of the full setup would only slow every mutation run's start.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startRedis } from './global-setup.ts';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // The tests' temporary directories go under one root in the working directory: under Stryker that
  // is its sandbox, removed with it, so a test runner killed for a mutant's timeout (its tests' own
  // clean-up never runs) leaves nothing in the system's temporary directory. os.tmpdir() reads TMPDIR.
  const root = await mkdtemp(path.join(process.cwd(), '.mutation-tmp-'));
  process.env.TMPDIR = root;
  const given = process.env.ARKVORY_TEST_REDIS_URL;
  const redis = given ? undefined : await startRedis();
  project.provide('redisUrl', given ?? redis!.url);
  return async () => {
    redis?.child.kill('SIGTERM');
    await rm(root, { recursive: true, force: true });
  };
}
