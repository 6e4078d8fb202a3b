/**
 * The gateway the Redis-link chaos files start: one day-long `gateway_request` rule limiting each
 * principal's reads (so no test straddles a window, except at midnight UTC), Redis reached through a
 * toxiproxy link, a short rate-limit timeout, and one small artifact to read.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import { randomContent } from '../../test/support/content.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { call } from './gateways.ts';

export const SMALL_CONTENT_PATH = '/api/v1/repositories/chaos/artifacts/small.bin/content';

export async function startRedisLimitedGateway(options: {
  databaseUrl: string;
  /** The Redis URL through the toxiproxy link. */
  redisUrl: string;
  rule: string;
  limit: number;
  timeoutMs: number;
  /** A principal with write access to repository `chaos`: it uploads small.bin. */
  key: string;
  env?: Record<string, string>;
}): Promise<GatewayProcess> {
  const dir = await makeTempDir('arkvory-rules-');
  const rulesFile = path.join(dir, 'rate_limits.yaml');
  await writeFile(
    rulesFile,
    `rate_limits:\n  gateway_request:\n    - name: ${options.rule}\n      action: limit\n      characteristics: [principal]\n      limit: ${options.limit}\n      period_s: 86400\n      match: { request_type: read }\n`,
  );
  const gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: options.databaseUrl,
      ARKVORY_REDIS_URL: options.redisUrl,
      ARKVORY_RATE_LIMITS_FILE: rulesFile,
      ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: String(options.timeoutMs),
      ...options.env,
    },
    timeoutMs: 60_000,
  });
  const put = await call(`${gateway.url}/api/v1/repositories/chaos/artifacts/small.bin`, {
    method: 'PUT',
    key: options.key,
    headers: { 'content-type': 'application/octet-stream' },
    body: randomContent(1024),
  });
  expect(put.status).toBe(201);
  return gateway;
}
