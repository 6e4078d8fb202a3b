import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { CLIENT_VARIABLE_NAMES } from '../../client/index.ts';
import { ConfigError, loadConfig, VARIABLES } from './config.ts';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env, '/srv');
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems];
    throw err;
  }
  return [];
}

describe('loadConfig', () => {
  it('fills every default from the table', () => {
    const config = loadConfig({}, '/srv');
    expect(config).toMatchObject({
      role: 'api',
      host: '127.0.0.1',
      port: 8080,
      dataDir: '/srv/data',
      databaseUrl: undefined,
      databasePoolSize: 10,
      logLevel: 'info',
      shutdownTimeoutMs: 30_000,
      shared: null,
    });
    expect(config.admission.maxDownloadsPerPrincipal).toBe(4);
  });

  it('bounds the gateway statements by 5 s unless ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS says otherwise', () => {
    expect(loadConfig({}).databaseQueryTimeoutMs).toBe(5000);
    expect(loadConfig({ ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '100' }).databaseQueryTimeoutMs).toBe(100);
    expect(loadConfig({ ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS: '600000' }).databaseQueryTimeoutMs).toBe(600_000);
  });

  it('derives the slice cache file bound from its byte bound (one file per 16 KiB) unless set', () => {
    expect(loadConfig({}).sliceCache.maxFiles).toBe(655360);
    expect(loadConfig({ ARKVORY_CACHE_MAX_BYTES: '1048576' }).sliceCache.maxFiles).toBe(64);
    expect(
      loadConfig({ ARKVORY_CACHE_MAX_BYTES: '1048576', ARKVORY_CACHE_MAX_FILES: '1000' }).sliceCache.maxFiles,
    ).toBe(1000);
    expect(() => loadConfig({ ARKVORY_CACHE_MAX_FILES: '0' })).toThrow(/ARKVORY_CACHE_MAX_FILES/);
  });

  it('derives the per-principal download cap as min(4, MAX_DOWNLOADS)', () => {
    expect(loadConfig({ ARKVORY_MAX_DOWNLOADS: '2' }).admission.maxDownloadsPerPrincipal).toBe(2);
    expect(
      loadConfig({ ARKVORY_MAX_DOWNLOADS: '2', ARKVORY_MAX_DOWNLOADS_PER_PRINCIPAL: '7' }).admission
        .maxDownloadsPerPrincipal,
    ).toBe(7);
  });

  it.each([
    ['ARKVORY_PORT', 'abc', 'expected an integer from 0 to 65535, got "abc"'],
    ['ARKVORY_PORT', '65536', 'got "65536"'],
    ['ARKVORY_PORT', '08', 'got "08"'],
    ['ARKVORY_ROLE', 'boss', 'expected one of api|reader|worker|router|rules-service, got "boss"'],
    ['ARKVORY_DATABASE_POOL_SIZE', '0', 'expected an integer from 1 to 1000, got "0"'],
    ['ARKVORY_DATABASE_POOL_SIZE', '-1', 'got "-1"'],
    ['ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS', '99', 'expected an integer from 100 to 600000, got "99"'],
    ['ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS', '600001', 'got "600001"'],
    ['ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS', '0', 'got "0"'],
    ['ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS', '1.5', 'got "1.5"'],
    ['ARKVORY_DATABASE_QUERY_TIMEOUT_MILLISECONDS', '5s', 'got "5s"'],
    ['ARKVORY_LOG_LEVEL', 'loud', 'got "loud"'],
    ['ARKVORY_DATABASE_URL', 'mysql://x', 'got <redacted>'],
    ['ARKVORY_REDIS_URL', 'not a url', 'got <redacted>'],
    ['ARKVORY_SHUTDOWN_TIMEOUT_SECONDS', '1.5', 'got "1.5"'],
  ])('%s=%s is refused with a line naming it', (name, value, expected) => {
    const problems = problemsOf({ [name]: value });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(new RegExp(`^${name}: `));
    expect(problems[0]).toContain(expected);
  });

  it.each([
    ['sslmode=no-verify', false],
    ['sslmode=require&uselibpqcompat=true', false],
    ['sslmode=verify-ca&uselibpqcompat=true', false],
    ['sslmode=prefer&uselibpqcompat=true', false],
    ['sslmode=verify-full&uselibpqcompat=true', true],
    ['sslmode=verify-full', true],
    ['sslmode=require', true], // node-postgres verifies it like verify-full
    ['sslmode=disable', true],
    ['sslrootcert=/etc/ca.pem', true],
  ])('ARKVORY_DATABASE_URL with %s: accepted %s (no setting turns certificate checks off)', (query, accepted) => {
    const problems = problemsOf({ ARKVORY_DATABASE_URL: `postgres://arkvory:hunter2@db/arkvory?${query}` });
    expect(problems).toEqual(
      accepted
        ? []
        : [
            expect.stringMatching(
              /^ARKVORY_DATABASE_URL: sslmode=\S+.* does not verify the server's certificate; use sslmode=verify-full/,
            ),
          ],
    );
    expect(problems.join('\n')).not.toContain('hunter2');
  });

  it.each([
    // node-postgres takes a parameter's last value; the check took the first.
    ['sslmode=verify-full&sslmode=no-verify', 'sslmode=no-verify does not verify'],
    [
      'sslmode=require&uselibpqcompat=false&uselibpqcompat=true',
      'sslmode=require with uselibpqcompat=true does not verify',
    ],
    // node-postgres reads `ssl=no-verify` as sslmode=no-verify.
    ['ssl=no-verify', 'ssl=no-verify does not verify'],
  ])(
    'ARKVORY_DATABASE_URL with %s: refused (every spelling node-postgres reads as "believe any certificate")',
    (query, refusal) => {
      const problems = problemsOf({ ARKVORY_DATABASE_URL: `postgres://arkvory:hunter2@db/arkvory?${query}` });
      expect(problems).toEqual([expect.stringContaining(`ARKVORY_DATABASE_URL: ${refusal}`)]);
      expect(problems.join('\n')).not.toContain('hunter2');
    },
  );

  it('PGSSLMODE=no-verify, which node-postgres reads when the URL sets no TLS parameter, is refused', () => {
    expect(problemsOf({ ARKVORY_DATABASE_URL: 'postgres://arkvory@db/arkvory', PGSSLMODE: 'no-verify' })).toEqual([
      expect.stringContaining("PGSSLMODE: no-verify does not verify the server's certificate"),
    ]);
    expect(problemsOf({ ARKVORY_DATABASE_URL: 'postgres://arkvory@db/arkvory', PGSSLMODE: 'verify-full' })).toEqual([]);
    // The URL's own sslmode is what node-postgres reads then.
    expect(
      problemsOf({ ARKVORY_DATABASE_URL: 'postgres://arkvory@db/arkvory?sslmode=verify-full', PGSSLMODE: 'no-verify' }),
    ).toEqual([]);
  });

  it.each([
    ['require_auth=scram-sha-256', undefined],
    ['require_auth=!password,!md5', undefined],
    ['require_auth=scram', 'require_auth names an unknown method'],
    ['require_auth=scram-sha-256,!password', 'require_auth cannot mix methods and !methods'],
  ])('ARKVORY_DATABASE_URL with %s: refused %s (libpq meaning)', (query, refusal) => {
    const problems = problemsOf({ ARKVORY_DATABASE_URL: `postgres://arkvory:hunter2@db/arkvory?${query}` });
    expect(problems).toEqual(
      refusal === undefined ? [] : [expect.stringContaining(`ARKVORY_DATABASE_URL: ${refusal}`)],
    );
    expect(problems.join('\n')).not.toContain('hunter2');
  });

  it('never echoes a secret value', () => {
    const problems = problemsOf({ ARKVORY_DATABASE_URL: 'ftp://user:hunter2@db' });
    expect(problems.join('\n')).not.toContain('hunter2');
  });

  it('collects every problem at once and rejects unknown ARKVORY_ names', () => {
    const problems = problemsOf({ ARKVORY_PORT: 'x', ARKVORY_ROLE: 'y', ARKVORY_PROT: '1' });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual(['ARKVORY_PORT', 'ARKVORY_PROT', 'ARKVORY_ROLE']);
  });

  it("ignores the client commands' own variables, and still refuses their misspellings", () => {
    const clientEnv = Object.fromEntries(CLIENT_VARIABLE_NAMES.map((name) => [name, 'x']));
    expect(CLIENT_VARIABLE_NAMES).toEqual(
      expect.arrayContaining(['ARKVORY_URL', 'ARKVORY_KEY', 'ARKVORY_KEY_FILE', 'ARKVORY_UPLOAD_STATE_DIR']),
    );
    expect(problemsOf(clientEnv)).toEqual([]);
    expect(loadConfig(clientEnv, '/srv')).toEqual(loadConfig({}, '/srv'));
    expect(problemsOf({ ...clientEnv, ARKVORY_URLS: 'x', ARKVORY_KEYFILE: 'x', ARKVORY_KEY_FILES: 'x' })).toEqual([
      expect.stringMatching(/^ARKVORY_URLS: unknown variable/),
      expect.stringMatching(/^ARKVORY_KEYFILE: unknown variable/),
      expect.stringMatching(/^ARKVORY_KEY_FILES: unknown variable/),
    ]);
  });

  it('no client variable shares a name with a server variable', () => {
    const server = new Set(VARIABLES.map((v) => v.name));
    expect(CLIENT_VARIABLE_NAMES.filter((name) => server.has(name))).toEqual([]);
  });

  it('the static-HTTP store: a base URL and its timeouts; no credentials (never echoed), no query', () => {
    const config = loadConfig(
      { ARKVORY_STORAGE_URL: 'http://10.0.0.20:8081/arkvory/', ARKVORY_STORAGE_TIMEOUT_SECONDS: '5' },
      '/srv',
    );
    expect(config.storage).toEqual({
      url: 'http://10.0.0.20:8081/arkvory/',
      connectTimeoutMs: 3000,
      timeoutMs: 5000,
      probeIntervalMs: 2000,
    });
    expect(loadConfig({}, '/srv').storage.url).toBeUndefined();
    const withPassword = problemsOf({ ARKVORY_STORAGE_URL: 'http://u:hunter2@store/' });
    expect(withPassword).toEqual([expect.stringMatching(/^ARKVORY_STORAGE_URL: credentials/)]);
    expect(withPassword.join('\n')).not.toContain('hunter2');
    expect(problemsOf({ ARKVORY_STORAGE_URL: 'http://store/a?x=1' })).toEqual([
      expect.stringMatching(/^ARKVORY_STORAGE_URL: expected a base URL/),
    ]);
    expect(problemsOf({ ARKVORY_STORAGE_URL: 'ftp://store/' })).toEqual([
      expect.stringMatching(/^ARKVORY_STORAGE_URL: /),
    ]);
    expect(problemsOf({ ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: '10' })).toEqual([
      expect.stringMatching(/^ARKVORY_STORAGE_CONNECT_TIMEOUT_MILLISECONDS: /),
    ]);
  });

  it('the S3 store: s3://bucket/prefix, an endpoint, a region and the AWS credentials (never echoed)', () => {
    const creds = { AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'hunter2-secret' };
    const config = loadConfig(
      { ARKVORY_STORAGE_URL: 's3://artifacts/arkvory', ARKVORY_S3_ENDPOINT: 'http://10.0.0.30:8333', ...creds },
      '/srv',
    );
    expect(config.storage.s3).toEqual({
      location: { bucket: 'artifacts', prefix: 'arkvory/' },
      endpoint: 'http://10.0.0.30:8333',
      region: 'us-east-1',
      credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'hunter2-secret', sessionToken: undefined },
    });
    // AWS itself when no endpoint is given; a session token is passed on.
    const aws = loadConfig(
      { ARKVORY_STORAGE_URL: 's3://artifacts', ARKVORY_S3_REGION: 'eu-west-1', AWS_SESSION_TOKEN: 'tok', ...creds },
      '/srv',
    );
    expect(aws.storage.s3).toMatchObject({
      endpoint: 'https://s3.eu-west-1.amazonaws.com',
      region: 'eu-west-1',
      credentials: { sessionToken: 'tok' },
    });
    expect(problemsOf({ ARKVORY_STORAGE_URL: 's3://artifacts/' })).toEqual([
      expect.stringMatching(/^AWS_ACCESS_KEY_ID: required/),
      expect.stringMatching(/^AWS_SECRET_ACCESS_KEY: required/),
    ]);
    expect(problemsOf({ ARKVORY_STORAGE_URL: 's3://Bad_Bucket/', ...creds })).toEqual([
      expect.stringMatching(/^ARKVORY_STORAGE_URL: "Bad_Bucket" is not a valid S3 bucket name/),
    ]);
    expect(problemsOf({ ARKVORY_S3_ENDPOINT: 'http://10.0.0.30:8333' })).toEqual([
      expect.stringMatching(/^ARKVORY_S3_ENDPOINT: only used with an s3:/),
    ]);
    expect(
      problemsOf({ ARKVORY_STORAGE_URL: 's3://artifacts/', ARKVORY_S3_ENDPOINT: 'ftp://x', ...creds }).join('\n'),
    ).toMatch(/^ARKVORY_S3_ENDPOINT: /);
    expect(
      problemsOf({
        ARKVORY_STORAGE_URL: 's3://artifacts/',
        ARKVORY_S3_ENDPOINT: 'http://10.0.0.30:8333/minio',
        ...creds,
      }),
    ).toEqual([expect.stringMatching(/^ARKVORY_S3_ENDPOINT: expected an origin/)]);
    expect(
      problemsOf({
        ARKVORY_STORAGE_URL: 's3://artifacts/',
        ARKVORY_S3_ENDPOINT: 'http://u:hunter2@10.0.0.30:8333',
        ...creds,
      }).join('\n'),
    ).not.toContain('hunter2');
    // A body past one S3 multipart upload (10 000 parts of 5 GiB) could never be stored.
    expect(
      problemsOf({
        ARKVORY_STORAGE_URL: 's3://artifacts/',
        ARKVORY_MAX_UPLOAD_BYTES: String(10_000 * 5 * 2 ** 30 + 1),
        ...creds,
      }),
    ).toEqual([expect.stringMatching(/^ARKVORY_MAX_UPLOAD_BYTES: at most 53687091200000 \(10000 parts of 5 GiB/)]);
    expect(
      problemsOf({
        ARKVORY_STORAGE_URL: 's3://artifacts/',
        ARKVORY_MAX_UPLOAD_BYTES: String(10_000 * 5 * 2 ** 30),
        ...creds,
      }),
    ).toEqual([]);
    expect(problemsOf({ ARKVORY_MAX_UPLOAD_BYTES: String(2 ** 50) })).toEqual([]);
    for (const problems of [
      problemsOf({ ARKVORY_STORAGE_URL: 's3://Bad_Bucket/', ...creds }),
      problemsOf({ ARKVORY_STORAGE_URL: 's3://x', ...creds }),
    ])
      expect(problems.join('\n')).not.toContain('hunter2');
  });

  it('ignores the test harness variables', () => {
    expect(() => loadConfig({ ARKVORY_TEST_DATABASE_URL: 'x' })).not.toThrow();
  });

  describe('shared profile', () => {
    const shared = { ARKVORY_GATEWAY_SLOTS: '2', ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '67108864' };
    it('accepts the spec example for the writer and a reader', () => {
      expect(loadConfig({ ...shared, ARKVORY_GATEWAY_SLOT: '0' }).shared).toEqual({
        slots: 2,
        slot: 0,
        downloadBytesPerSec: 67108864,
        downloadBytesPerSecPerPrincipal: 0,
      });
      expect(loadConfig({ ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' }).shared?.slot).toBe(1);
    });
    it.each([
      [{ ...shared, ARKVORY_GATEWAY_SLOT: '1' }, 'ARKVORY_GATEWAY_SLOT: the writer'],
      [
        { ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '2' },
        'ARKVORY_GATEWAY_SLOT: a reader takes a slot from 1 to 1',
      ],
      [{ ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '0' }, 'ARKVORY_GATEWAY_SLOT: a reader'],
      [{ ARKVORY_GATEWAY_SLOTS: '2', ARKVORY_GATEWAY_SLOT: '0' }, 'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: required'],
      [
        { ...shared, ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '131071', ARKVORY_GATEWAY_SLOT: '0' },
        'from 131072 (SLOTS × 65536)',
      ],
      [{ ...shared }, 'ARKVORY_GATEWAY_SLOT: required'],
      [{ ARKVORY_GATEWAY_SLOTS: '17' }, 'ARKVORY_GATEWAY_SLOTS: expected an integer from 2 to 16'],
      [{ ARKVORY_GATEWAY_SLOT: '0' }, 'only valid with ARKVORY_GATEWAY_SLOTS'],
      [{ ARKVORY_ROLE: 'reader' }, 'needs the shared profile'],
    ])('refuses %j', (env, expected) => {
      expect(problemsOf(env as Record<string, string>).join('\n')).toContain(expected);
    });
  });

  describe('ARKVORY_TLS_HSTS', () => {
    const tls = { ARKVORY_TLS_CERT_FILE: 'tls/gw.crt', ARKVORY_TLS_KEY_FILE: 'tls/gw.key' };
    it('is off by default; with TLS it is the Strict-Transport-Security value, sent in its canonical form', () => {
      expect(loadConfig(tls, '/srv').tls?.hsts).toBeUndefined();
      expect(loadConfig({ ...tls, ARKVORY_TLS_HSTS: 'max-age=31536000; includeSubDomains' }, '/srv').tls?.hsts).toBe(
        'max-age=31536000; includeSubDomains',
      );
      expect(loadConfig({ ...tls, ARKVORY_TLS_HSTS: 'preload ;MAX-AGE="0"' }, '/srv').tls?.hsts).toBe(
        'max-age=0; preload',
      );
      const router = { ...tls, ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: 'https://127.0.0.1:8081' };
      expect(loadConfig({ ...router, ARKVORY_TLS_HSTS: 'max-age=600' }, '/srv').tls?.hsts).toBe('max-age=600');
    });
    it.each([
      [
        { ARKVORY_TLS_HSTS: 'max-age=31536000' },
        'ARKVORY_TLS_HSTS: Strict-Transport-Security is sent over TLS only (RFC 6797 §7.2); set ARKVORY_TLS_CERT_FILE and ARKVORY_TLS_KEY_FILE',
      ],
      [
        { ...tls, ARKVORY_TLS_HSTS: 'includeSubDomains' },
        'ARKVORY_TLS_HSTS: max-age is required (RFC 6797 §6.1.1); expected e.g. "max-age=31536000; includeSubDomains", got "includeSubDomains"',
      ],
      [{ ...tls, ARKVORY_TLS_HSTS: 'max-age=-5' }, 'ARKVORY_TLS_HSTS: max-age must be a number of seconds'],
      [{ ...tls, ARKVORY_TLS_HSTS: 'max-age=60; includesubdomain' }, 'unknown directive "includesubdomain"'],
    ])('refuses %j', (env, expected) => {
      const problems = problemsOf(env);
      expect(problems).toHaveLength(1);
      expect(problems[0]).toContain(expected);
    });
  });

  describe('ARKVORY_WORKERS', () => {
    const db = { ARKVORY_DATABASE_URL: 'postgres://arkvory@127.0.0.1/arkvory' };
    const shared = {
      ...db,
      ARKVORY_REDIS_URL: 'redis://127.0.0.1:6379',
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '67108864',
      ARKVORY_WORKERS: '2',
    };
    it('takes several workers for the writer and a reader, standalone and in the shared profile, and for a router', () => {
      const router = { ARKVORY_ROUTER_BACKENDS: 'http://127.0.0.1:8081', ARKVORY_ROLE: 'router', ARKVORY_WORKERS: '3' };
      expect(loadConfig(router).workers).toBe(3);
      expect(loadConfig({ ...db, ARKVORY_WORKERS: '4' }).workers).toBe(4);
      expect(loadConfig({ ...shared, ARKVORY_GATEWAY_SLOT: '0' }).workers).toBe(2);
      expect(loadConfig({ ...shared, ARKVORY_ROLE: 'reader', ARKVORY_GATEWAY_SLOT: '1' }).workers).toBe(2);
    });
    it('defaults to one process; auto is one worker per core this process may use where the role runs on workers, else 1', () => {
      expect(loadConfig(db).workers).toBe(1);
      expect(loadConfig({ ...db, ARKVORY_WORKERS: 'auto' }).workers).toBe(availableParallelism());
      expect(loadConfig({ ...db, ARKVORY_WORKERS: 'auto', ARKVORY_ROLE: 'worker' }).workers).toBe(1);
      // The embedded PostgreSQL is one process's.
      expect(loadConfig({ ARKVORY_WORKERS: 'auto' }).workers).toBe(1);
    });
    it.each([
      [{ ARKVORY_WORKERS: '2' }, 'ARKVORY_WORKERS: above 1 needs ARKVORY_DATABASE_URL'],
      [
        { ...db, ARKVORY_WORKERS: '12', ARKVORY_MAX_CONNECTIONS: '8' },
        "ARKVORY_MAX_CONNECTIONS: the instance's bound, shared by its workers, must be at least ARKVORY_WORKERS (12); got 8",
      ],
      [{ ARKVORY_WORKERS: 'Auto' }, 'ARKVORY_WORKERS: expected `auto` or an integer from 1 to 256, got "Auto"'],
      [{ ARKVORY_WORKERS: '0' }, 'ARKVORY_WORKERS: expected `auto` or an integer from 1 to 256, got "0"'],
      [{ ...db, ARKVORY_WORKERS: '2', ARKVORY_ROLE: 'worker' }, 'ARKVORY_WORKERS: above 1 only for ARKVORY_ROLE=api'],
      [
        { ...db, ARKVORY_WORKERS: '2', ARKVORY_ROLE: 'rules-service' },
        'ARKVORY_WORKERS: above 1 only for ARKVORY_ROLE=api',
      ],
    ])('refuses %j', (env, expected) => {
      expect(problemsOf(env as Record<string, string>).join('\n')).toContain(expected);
    });
  });

  it('reads the Phase 3 rules-service variables (service name checked, the role needs a database)', () => {
    expect(loadConfig({}).rulesService).toEqual({
      url: undefined,
      timeoutMs: 100,
      maxTtlMs: 60_000,
      token: undefined,
      ttlSeconds: 30,
      tokenGraceMs: 600_000,
    });
    expect(loadConfig({}).serviceName).toBe('arkvory');
    const config = loadConfig({
      ARKVORY_RULES_SERVICE_URL: 'http://10.0.0.9:8090',
      ARKVORY_RULES_SERVICE_TIMEOUT_MS: '50',
      ARKVORY_RULES_SERVICE_MAX_TTL_SECONDS: '5',
      ARKVORY_SERVICE_NAME: 'arkvory-eu',
    });
    expect(config.rulesService).toMatchObject({ url: 'http://10.0.0.9:8090', timeoutMs: 50, maxTtlMs: 5000 });
    expect(problemsOf({ ARKVORY_SERVICE_NAME: 'Not A Name' }).join('\n')).toContain(
      'ARKVORY_SERVICE_NAME: expected ^[a-z0-9][a-z0-9_.-]{0,63}$',
    );
    expect(problemsOf({ ARKVORY_RULES_SERVICE_URL: 'redis://x' }).join('\n')).toContain(
      'ARKVORY_RULES_SERVICE_URL: expected a URL with scheme http:// or https://',
    );
    expect(problemsOf({ ARKVORY_ROLE: 'rules-service' })).toEqual([
      'ARKVORY_ROLE: "rules-service" keeps its overrides in PostgreSQL; set ARKVORY_DATABASE_URL',
    ]);
    expect(problemsOf({ ARKVORY_ROLE: 'rules-service', ARKVORY_DATABASE_URL: 'postgres://db/arkvory' })).toEqual([]);
  });

  it('never echoes the user info of a URL, whatever variable carries it and however it is malformed', () => {
    const secret = 's3cr3t-pw';
    const problems = problemsOf({
      ARKVORY_STORAGE_URL: `http://u:${secret}@store:8081/a?x=1`,
      ARKVORY_ADVERTISE_URL: `http://u:${secret}@10.0.0.5:8080/path`,
      ARKVORY_RULES_SERVICE_URL: `ftp://u:${secret}@rules`,
      ARKVORY_ROUTER_BACKENDS: `http://u:${secret}@a:1/x,http://b:2`,
      ARKVORY_REDIS_URL: `http//u:${secret}@redis`,
    });
    expect(problems.length).toBeGreaterThanOrEqual(4);
    for (const line of problems) expect(line).not.toContain(secret);
    expect(problems.find((p) => p.startsWith('ARKVORY_RULES_SERVICE_URL:'))).toContain('ftp://<redacted>@rules');
  });

  it('never echoes a query, nor user info the URL parser finds however it is spelt or broken', () => {
    const secret = 's3cr3t-pw';
    const cases: Record<string, string>[] = [
      // Signed-URL and token queries, in every variable that echoes a URL.
      { ARKVORY_STORAGE_URL: `http://store:8081/a/?X-Amz-Signature=${secret}&token=${secret}` },
      { ARKVORY_STORAGE_URL: `s3://bucket/p/?X-Amz-Signature=${secret}` },
      { ARKVORY_ADVERTISE_URL: `http://10.0.0.5:8080/?token=${secret}`, ARKVORY_GATEWAY_SLOTS: '2' },
      { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: `http://a:1,http://b:2/?token=${secret}` },
      // User info without `//`, a password holding `/`, `?`, `#`, `//`, spaces or quotes.
      { ARKVORY_RULES_SERVICE_URL: `ftp:svc:${secret}@rules` },
      { ARKVORY_RULES_SERVICE_URL: `ftp:\\svc:${secret}@rules` },
      { ARKVORY_RULES_SERVICE_URL: `http://svc:pa/${secret}@rules:9000/` },
      { ARKVORY_RULES_SERVICE_URL: `http://svc:pa?${secret}@rules:9000/` },
      { ARKVORY_RULES_SERVICE_URL: `http://svc:pa//${secret}@rules:9000/` },
      { ARKVORY_RULES_SERVICE_URL: `ftp://svc:pa ${secret}@rules/` },
      { ARKVORY_RULES_SERVICE_URL: `ftp://svc:pa\u3000${secret}@rules/` },
      { ARKVORY_RULES_SERVICE_URL: `ftp://svc:pa"${secret}@rules/` },
      { ARKVORY_ROLE: 'router', ARKVORY_ROUTER_BACKENDS: `http://a:1,http:svc:pa/${secret}@b:2` },
      // An `@` far past where a long value is cut.
      { ARKVORY_RULES_SERVICE_URL: `ftp://svc:${'p'.repeat(250)}${secret}@rules/` },
    ];
    for (const env of cases) {
      const problems = problemsOf(env);
      expect(problems.length, JSON.stringify(env)).toBeGreaterThanOrEqual(1);
      for (const line of problems) expect(line, JSON.stringify(env)).not.toMatch(/s3cr3t|ppppp/);
    }
    expect(problemsOf(cases[0]!)).toEqual([
      'ARKVORY_STORAGE_URL: expected a base URL without query or fragment (e.g. http://10.0.0.20:8081/arkvory/), got "http://store:8081/a/?<redacted>"',
    ]);
  });

  it('refuses an empty metrics or rules-service token (it would silently mean "open")', () => {
    const problems = problemsOf({ ARKVORY_METRICS_TOKEN: '', ARKVORY_RULES_SERVICE_TOKEN: '' });
    expect(problems).toEqual([
      'ARKVORY_METRICS_TOKEN: set but empty; give a non-empty secret, or unset the variable to leave it open on purpose',
      'ARKVORY_RULES_SERVICE_TOKEN: set but empty; give a non-empty secret, or unset the variable to leave it open on purpose',
    ]);
    expect(loadConfig({ ARKVORY_METRICS_TOKEN: 't' }).metrics.token).toBe('t');
    expect(loadConfig({}).metrics.token).toBeUndefined();
  });

  it("refuses an example's placeholder as the metrics or rules-service token, from the variable or its file", () => {
    const refusal = (name: string) =>
      `${name}: an example's placeholder (change-me…, replace-with…, <…>), which anyone who read the example could send; give a random secret (e.g. openssl rand -hex 32)`;
    expect(
      problemsOf({ ARKVORY_METRICS_TOKEN: 'change-me-metrics-token', ARKVORY_RULES_SERVICE_TOKEN: '<token>' }),
    ).toEqual([refusal('ARKVORY_METRICS_TOKEN'), refusal('ARKVORY_RULES_SERVICE_TOKEN')]);
    // A Kubernetes Secret or credential file holding the placeholder (one trailing newline dropped).
    const fromFile = (text: string) => () =>
      loadConfig({ ARKVORY_METRICS_TOKEN_FILE: '/run/secrets/metrics-token' }, '/', () => text.replace(/\n$/, ''));
    expect(fromFile('change-me-metrics-token\n')).toThrow(refusal('ARKVORY_METRICS_TOKEN'));
    expect(fromFile('9f86d081884c7d659a2feaa0c55ad015')().metrics.token).toBe('9f86d081884c7d659a2feaa0c55ad015');
  });

  it('reports every configuration problem in one pass: bad values and cross-variable checks together', () => {
    const problems = problemsOf({
      ARKVORY_PORT: 'abc',
      ARKVORY_GATEWAY_SLOTS: '2',
      ARKVORY_GATEWAY_SLOT: '5',
      ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: '1000',
      ARKVORY_SERVICE_NAME: 'Bad Name',
      ARKVORY_TRUSTED_PROXIES: 'not-an-ip',
      ARKVORY_ROUTER_BACKENDS: 'http://a:1',
    });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual([
      'ARKVORY_GATEWAY_SLOT',
      'ARKVORY_PORT',
      'ARKVORY_ROUTER_BACKENDS',
      'ARKVORY_SERVICE_NAME',
      'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
      'ARKVORY_TRUSTED_PROXIES',
    ]);
    // A check that depends on a bad variable is skipped rather than reported wrongly.
    expect(problemsOf({ ARKVORY_GATEWAY_SLOTS: 'x', ARKVORY_GATEWAY_SLOT: '1' }).map((p) => p.split(':')[0])).toEqual([
      'ARKVORY_GATEWAY_SLOTS',
    ]);
  });

  it('tracing: off unless an OTLP endpoint is set; OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER=none turn it off', () => {
    expect(loadConfig({}).tracing).toBeUndefined();
    // Read with tracing off too: a router then passes on only the contexts it would continue.
    expect(loadConfig({}).traceContextFrom).toBe('any');
    expect(loadConfig({ ARKVORY_TRACE_CONTEXT_FROM: 'none' }).traceContextFrom).toBe('none');
    const on = loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing;
    expect(on).toMatchObject({
      url: 'http://collector:4318/v1/traces',
      sampler: 'parentbased_always_on',
      samplerRatio: 1,
      maxQueueSize: 2048,
      maxExportBatchSize: 512,
      recordPrincipal: false,
      serviceName: 'arkvory',
    });
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    expect(loadConfig({ ...endpoint, OTEL_SDK_DISABLED: 'true' }).tracing).toBeUndefined();
    expect(loadConfig({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeUndefined();
    expect(
      loadConfig({ ...endpoint, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://c.example/otlp/traces' }).tracing?.url,
    ).toBe('https://c.example/otlp/traces');
    const ratio = loadConfig({
      ...endpoint,
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.01',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20abc,x-tenant=a',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod',
    }).tracing;
    expect(ratio?.samplerRatio).toBe(0.01);
    expect(ratio?.headers).toEqual({ authorization: 'Bearer abc', 'x-tenant': 'a' });
    expect(ratio?.resourceAttributes).toEqual({ 'deployment.environment.name': 'prod' });
  });

  it('tracing: refuses a bad ratio, a batch above the queue, an unsupported protocol and malformed headers (never echoing them)', () => {
    let caught: unknown;
    try {
      loadConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_TRACES_SAMPLER_ARG: '1.5',
        OTEL_BSP_MAX_QUEUE_SIZE: '10',
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '20',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_HEADERS: 'token-without-a-name-s3cret',
      });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    const problems = (caught as ConfigError).problems;
    expect(problems.some((p) => p.startsWith('OTEL_TRACES_SAMPLER_ARG:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('OTEL_BSP_MAX_EXPORT_BATCH_SIZE:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('OTEL_EXPORTER_OTLP_PROTOCOL:'))).toBe(true);
    expect(problems.some((p) => p.startsWith('OTEL_EXPORTER_OTLP_HEADERS:'))).toBe(true);
    expect(problems.join('\n')).not.toContain('s3cret');
  });

  it('returns a deep-frozen object', () => {
    const config = loadConfig({});
    expect(Object.isFrozen(config)).toBe(true);
    expect(Object.isFrozen(config.bandwidth)).toBe(true);
  });

  it('declares every variable once, with the ARKVORY_ prefix (or OTEL_, the OpenTelemetry names) and a doc line', () => {
    const names = VARIABLES.map((v) => v.name);
    expect(new Set(names).size).toBe(names.length);
    for (const v of VARIABLES) {
      expect(v.name).toMatch(/^(ARKVORY|OTEL)_[A-Z0-9_]+$/);
      expect(v.doc.length).toBeGreaterThan(10);
    }
  });

  it('front-door timeouts: nginx-like defaults, and the idle timeouts must outlast the admission wait', () => {
    expect(loadConfig({}, '/srv').frontDoor).toEqual({
      headersTimeoutMs: 30_000,
      bodyIdleTimeoutMs: 60_000,
      sendIdleTimeoutMs: 60_000,
      keepAliveTimeoutMs: 5_000,
      maxConnections: undefined,
    });
    expect(problemsOf({ ARKVORY_BODY_TIMEOUT_SECONDS: '30' })).toEqual([
      expect.stringMatching(/^ARKVORY_BODY_TIMEOUT_SECONDS: expected more than ARKVORY_ADMISSION_WAIT_SECONDS \(30\)/),
    ]);
    expect(problemsOf({ ARKVORY_SEND_TIMEOUT_SECONDS: '5', ARKVORY_ADMISSION_WAIT_SECONDS: '10' })).toEqual([
      expect.stringMatching(/^ARKVORY_SEND_TIMEOUT_SECONDS: expected more than/),
    ]);
    expect(problemsOf({ ARKVORY_HEADER_TIMEOUT_SECONDS: '0' })).toEqual([
      expect.stringMatching(/^ARKVORY_HEADER_TIMEOUT_SECONDS: expected an integer from 1 to 3600/),
    ]);
    expect(problemsOf({ ARKVORY_MAX_CONNECTIONS: '4' })).toEqual([
      expect.stringMatching(/^ARKVORY_MAX_CONNECTIONS: expected an integer from 8/),
    ]);
    expect(loadConfig({ ARKVORY_MAX_CONNECTIONS: '500' }, '/srv').frontDoor.maxConnections).toBe(500);
  });
});

describe('ARKVORY_PUBLIC_URL', () => {
  it('is kept as its origin and path without a trailing slash', () => {
    expect(loadConfig({}).publicUrl).toBeUndefined();
    expect(loadConfig({ ARKVORY_PUBLIC_URL: 'https://Tools.Example.com:443/' }).publicUrl).toBe(
      'https://tools.example.com',
    );
    expect(loadConfig({ ARKVORY_PUBLIC_URL: 'http://tools.example.com:8080/arkvory/' }).publicUrl).toBe(
      'http://tools.example.com:8080/arkvory',
    );
    expect(loadConfig({ ARKVORY_PUBLIC_URL: 'https://[2001:db8::1]/a/b' }).publicUrl).toBe('https://[2001:db8::1]/a/b');
  });

  it('refuses user info, a query, a fragment, another scheme and a path that is not plain segments', () => {
    for (const value of [
      'https://user:pw@tools.example.com',
      'https://tools.example.com/?x=1',
      'https://tools.example.com/?',
      'https://tools.example.com/#top',
      'ftp://tools.example.com',
      'tools.example.com',
      'https://tools.example.com/a/%2E%2E/b',
      'https://tools.example.com/a%2Fb',
      'https://tools.example.com//a',
    ]) {
      const problems = problemsOf({ ARKVORY_PUBLIC_URL: value });
      expect(problems, value).toHaveLength(1);
      expect(problems[0], value).toMatch(/^ARKVORY_PUBLIC_URL: /);
      expect(problems[0], value).not.toContain('pw@');
    }
  });
});
