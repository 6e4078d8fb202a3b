import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import type { RuleSpec } from '../../policy/rate-limit/rules.ts';
import { makeTempDir } from './temp-dir.ts';

/**
 * Writes the operator's rate-limits file (`ARKVORY_RATE_LIMITS_FILE`), each limiter with its rules
 * as given, as `rate_limits.yaml` under `dir` (a new temporary directory by default); returns its path.
 */
export async function writeRateLimitsFile(limiters: Record<string, RuleSpec[]>, dir?: string): Promise<string> {
  const file = path.join(dir ?? (await makeTempDir('arkvory-rules-')), 'rate_limits.yaml');
  await writeFile(file, stringify({ rate_limits: limiters }));
  return file;
}

/** A `gateway_request` rule limiting each principal to `limit` reads per `periodS` seconds. */
export function readsByPrincipal(name: string, limit: number, periodS: number): RuleSpec {
  return {
    name,
    action: 'limit',
    characteristics: ['principal'],
    limit,
    period_s: periodS,
    match: { request_type: 'read' },
  };
}
