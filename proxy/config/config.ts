/**
 * The gateway's configuration: every ARKVORY_* variable (variables.ts) read, parsed
 * (variable-values.ts), checked across variables (cross-checks.ts) and assembled (build-config.ts).
 */
import { GatewayError } from '../server/errors.ts';
import { redactQuotedUrls } from '../../lib/redact-url.ts';
import { buildConfig } from './build-config.ts';
import { resolveSecretFiles } from './secret-files.ts';
import {
  checkBypassPublishers,
  checkEndpoints,
  checkIdleTimeouts,
  checkServiceName,
  checkWorkers,
  checkSharedProfile,
} from './cross-checks.ts';
import { checkDatabaseTls, checkTls } from './tls-checks.ts';
import { checkTracing } from './tracing-config.ts';
import type { Config } from './types.ts';
import { VariableValues } from './variable-values.ts';

export type { Config, LogLevel, Role, S3Config, TracingConfig } from './types.ts';
export { describeAllowed } from './variable-values.ts';
export { VARIABLES, type VariableKind, type VariableSpec } from './variables.ts';

export const CONFIG_ERROR_CODE = 'invalid_config' as const;

export class ConfigError extends GatewayError {
  override readonly name = 'ConfigError';
  declare readonly code: typeof CONFIG_ERROR_CODE;
  /** One line per problem: `ARKVORY_X: expected …, got "…"`. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[], options?: { cause?: unknown }) {
    super(CONFIG_ERROR_CODE, problems.join('\n'), options);
    this.problems = problems;
  }
}

/**
 * Parses and validates every ARKVORY_* variable once. All problems are collected and thrown
 * together as one ConfigError, in one pass: the cross-variable checks run even when another
 * variable is bad, skipping only those that depend on a variable that failed. No problem line
 * carries a secret or the user info of a URL. The result is deep-frozen.
 */
export function loadConfig(
  env: Readonly<Record<string, string | undefined>>,
  cwd = process.cwd(),
  readSecret?: (file: string) => string,
): Config {
  const secrets = resolveSecretFiles(env, readSecret);
  const v = new VariableValues(secrets.env);
  v.problems.push(...secrets.problems);
  const { shared, sharedFailed } = checkSharedProfile(v);
  const endpoints = checkEndpoints(v, shared, sharedFailed);
  const bypassPublishers = checkBypassPublishers(v);
  checkServiceName(v);
  checkWorkers(v);
  for (const [password, url] of [
    ['ARKVORY_DATABASE_PASSWORD', 'ARKVORY_DATABASE_URL'],
    ['ARKVORY_REDIS_PASSWORD', 'ARKVORY_REDIS_URL'],
  ] as const)
    if (v.optStr(password) !== undefined && v.optStr(url) === undefined && !v.anyFailed(url))
      v.problems.push(`${password}: only used with ${url} (the password of the server it names)`);
  const tls = checkTls(v, cwd);
  checkDatabaseTls(v);
  const tracing = checkTracing(v);
  if (v.problems.length === 0) checkIdleTimeouts(v);
  if (v.problems.length > 0) {
    // Belt and braces: whatever a helper echoed of a URL (the value, one entry of a list), no
    // problem line shows its user info or query.
    const urlKind = (name: string) => ['url', 'url-list'].includes(v.known.get(name)?.kind.type ?? '');
    const urls = Object.entries(secrets.env).flatMap(([name, value]) =>
      value !== undefined && (urlKind(name) || value.includes('//')) ? [value] : [],
    );
    throw new ConfigError(v.problems.map((line) => redactQuotedUrls(line, urls)));
  }
  return deepFreeze(
    buildConfig(v, { shared, ...endpoints, bypassPublishers, tls, tracing, secretSources: secrets.sources }, cwd),
  );
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
