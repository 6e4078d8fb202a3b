import { expect } from 'vitest';
import { randomContent } from '../../test/support/content.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { readsByPrincipal, writeRateLimitsFile } from '../../test/harness/index.ts';
import { call } from './gateways.ts';

export const SMALL_CONTENT_PATH = '/api/v1/repositories/chaos/artifacts/small.bin/content';
/** The rate-limit timeout these gateways have (short, so failing open is quick) and how long a request may take failing open. */
export const FAIL_OPEN = {
  timeoutMs: 200,
  /** A request makes two Redis calls on this path (auth_failure peek, gateway_request check), each bounded by the timeout. */
  boundMs: 2 * 200 + 800,
} as const;

export async function startRedisLimitedGateway(options: {
  databaseUrl: string;
  /** The Redis URL through the toxiproxy link. */
  redisUrl: string;
  rule: string;
  limit: number;
  /** A principal with write access to repository `chaos`: it uploads small.bin. */
  key: string;
  env?: Record<string, string>;
}): Promise<GatewayProcess> {
  const rulesFile = await writeRateLimitsFile(
    { gateway_request: [readsByPrincipal(options.rule, options.limit, 86400)] },
    await makeTempDir('arkvory-rules-'), // removed when the test file ends
  );
  const gateway = await startGateway({
    env: {
      ARKVORY_DATABASE_URL: options.databaseUrl,
      ARKVORY_REDIS_URL: options.redisUrl,
      ARKVORY_RATE_LIMITS_FILE: rulesFile,
      ARKVORY_RATE_LIMIT_TIMEOUT_MILLISECONDS: String(FAIL_OPEN.timeoutMs),
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

/** One GET of SMALL_CONTENT_PATH, timed, with its RateLimit field and error code. */
export async function timedSmallGet(
  gateway: GatewayProcess,
  key: string,
): Promise<{ status: number; ms: number; ratelimit: string | undefined; code: string | undefined }> {
  const startedMs = performance.now();
  const res = await call(`${gateway.url}${SMALL_CONTENT_PATH}`, { key });
  return {
    status: res.status,
    ms: performance.now() - startedMs,
    ratelimit: res.headers.ratelimit as string | undefined,
    code: res.code,
  };
}
