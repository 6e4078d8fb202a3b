/**
 * The checks that span several variables (the shared profile, store and endpoint URLs, router
 * backends, bypass publishers, service name, idle timeouts). Each pushes its problems onto the
 * reader's list and skips what depends on a variable whose own value already failed.
 */
import { parseBackendList, parseOrigin } from '../router/backend-url.ts';
import { parseTrustedProxies } from '../router/forwarded.ts';
import { parsePublicUrl } from '../server/public-base.ts';
import { parseS3Url, S3_MAX_MULTIPART_BYTES } from '../../storage-adapter/s3/s3-location.ts';
import { parseRedisTarget } from '../../policy/rate-limit/redis-target.ts';
import { isPlaceholderSecret } from './placeholder-secrets.ts';
import type { Config, S3Config } from './types.ts';
import { shown, type VariableValues } from './variable-values.ts';
import { TiB } from './variables.ts';
import { runsOnWorkers, type WorkersSetting } from './worker-count.ts';

/** The shared-download profile (ARKVORY_GATEWAY_SLOTS …), or null; `sharedFailed` when a variable it needs failed. */
export function checkSharedProfile(v: VariableValues): { shared: Config['shared']; sharedFailed: boolean } {
  let shared: Config['shared'] = null;
  const sharedFailed = v.anyFailed(
    'ARKVORY_ROLE',
    'ARKVORY_GATEWAY_SLOTS',
    'ARKVORY_GATEWAY_SLOT',
    'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
    'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
  );
  if (!sharedFailed) {
    const slots = v.optNum('ARKVORY_GATEWAY_SLOTS');
    const slot = v.optNum('ARKVORY_GATEWAY_SLOT');
    const sharedRate = v.optNum('ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND');
    const sharedPerPrincipal = v.optNum('ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL');
    const role = v.str('ARKVORY_ROLE');
    if (slots === undefined) {
      for (const name of [
        'ARKVORY_GATEWAY_SLOT',
        'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND',
        'ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL',
      ]) {
        if (v.values.get(name) !== undefined)
          v.problems.push(
            `${name}: only valid with ARKVORY_GATEWAY_SLOTS (the shared profile); got ${shown(v.known.get(name), String(v.values.get(name)))}`,
          );
      }
      if (role === 'reader')
        v.problems.push(
          'ARKVORY_ROLE: "reader" needs the shared profile (set ARKVORY_GATEWAY_SLOTS, ARKVORY_GATEWAY_SLOT and ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND)',
        );
    } else {
      const minRate = slots * 65536;
      if (sharedRate === undefined)
        v.problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: required with ARKVORY_GATEWAY_SLOTS; expected an integer from ${minRate} to ${TiB}`,
        );
      else if (sharedRate < minRate)
        v.problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND: expected an integer from ${minRate} (SLOTS × 65536) to ${TiB}, got "${sharedRate}"`,
        );
      if (sharedPerPrincipal !== undefined && sharedPerPrincipal !== 0 && sharedPerPrincipal < minRate)
        v.problems.push(
          `ARKVORY_SHARED_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: expected 0 or an integer from ${minRate} (SLOTS × 65536) to ${TiB}, got "${sharedPerPrincipal}"`,
        );
      if (slot === undefined)
        v.problems.push(
          `ARKVORY_GATEWAY_SLOT: required with ARKVORY_GATEWAY_SLOTS; expected 0 for the writer or 1 to ${slots - 1} for a reader`,
        );
      else if (role === 'api' && slot !== 0)
        v.problems.push(`ARKVORY_GATEWAY_SLOT: the writer (ARKVORY_ROLE=api) is always slot 0, got "${slot}"`);
      else if (role === 'reader' && (slot < 1 || slot > slots - 1))
        v.problems.push(`ARKVORY_GATEWAY_SLOT: a reader takes a slot from 1 to ${slots - 1}, got "${slot}"`);
      if (sharedRate !== undefined && slot !== undefined) {
        shared = {
          slots,
          slot,
          downloadBytesPerSec: sharedRate,
          downloadBytesPerSecPerPrincipal: sharedPerPrincipal ?? 0,
        };
      }
    }
  }
  return { shared, sharedFailed };
}

/** Advertised URL, public URL, storage URL (and S3 settings), Redis target, trusted proxies and router backends. */
export function checkEndpoints(
  v: VariableValues,
  shared: Config['shared'],
  sharedFailed: boolean,
): {
  advertiseUrl: string | undefined;
  s3: S3Config | undefined;
  trustedProxies: string[];
  routerBackends: string[] | undefined;
  publicUrl: string | undefined;
} {
  let advertiseUrl: string | undefined;
  let s3: S3Config | undefined;
  let trustedProxies: string[] = [];
  let routerBackends: string[] | undefined;
  const role = v.failed.has('ARKVORY_ROLE') ? undefined : v.str('ARKVORY_ROLE');
  const advertise = v.optStr('ARKVORY_ADVERTISE_URL');
  if (advertise !== undefined) {
    const parsed = parseOrigin(advertise);
    if (!parsed.ok) v.problems.push(`ARKVORY_ADVERTISE_URL: ${parsed.problem}`);
    else if (sharedFailed)
      advertiseUrl = parsed.value; // whether it is shared is unknown: reported above
    else if (!shared)
      v.problems.push(
        'ARKVORY_ADVERTISE_URL: only recorded in the shared profile (set ARKVORY_GATEWAY_SLOTS); a standalone gateway is listed in ARKVORY_ROUTER_BACKENDS instead',
      );
    else advertiseUrl = parsed.value;
  }
  const storageUrl = v.optStr('ARKVORY_STORAGE_URL');
  if (storageUrl !== undefined) {
    const u = new URL(storageUrl);
    // The gateway sends no credentials to the store (restrict it by network), and a query or
    // fragment would be silently dropped from every object name.
    if (u.username || u.password)
      v.problems.push(
        'ARKVORY_STORAGE_URL: credentials in the URL are not supported; restrict the store to the gateways by network instead, got "<redacted>"',
      );
    else if (u.protocol === 's3:') {
      const parsed = parseS3Url(storageUrl);
      if (!parsed.ok) v.problems.push(`ARKVORY_STORAGE_URL: ${parsed.problem}`);
      const accessKeyId = v.env.AWS_ACCESS_KEY_ID;
      const secretAccessKey = v.env.AWS_SECRET_ACCESS_KEY;
      if (!accessKeyId)
        v.problems.push(
          'AWS_ACCESS_KEY_ID: required with an s3:// ARKVORY_STORAGE_URL (the S3 store signs every request)',
        );
      if (!secretAccessKey)
        v.problems.push(
          'AWS_SECRET_ACCESS_KEY: required with an s3:// ARKVORY_STORAGE_URL (the S3 store signs every request)',
        );
      // The S3 server of the example (deploy/s3-store/s3.json) holds the same placeholder pair: taken
      // as typed, its bucket would answer whoever read the example.
      const placeholders = [
        ['AWS_ACCESS_KEY_ID', accessKeyId],
        ['AWS_SECRET_ACCESS_KEY', secretAccessKey],
      ].filter(([, value]) => value && isPlaceholderSecret(value));
      for (const [name] of placeholders)
        v.problems.push(
          `${name}: an example's placeholder (change-me…, replace-with…, <…>); give the key of an S3 identity made for the gateways, and replace the example's keys on the S3 server too`,
        );
      // The store could not take a body past one multipart upload's 10 000 parts of 5 GiB: it would
      // fail only after the client sent it all.
      const maxUpload = v.failed.has('ARKVORY_MAX_UPLOAD_BYTES') ? undefined : v.num('ARKVORY_MAX_UPLOAD_BYTES');
      if (maxUpload !== undefined && maxUpload > S3_MAX_MULTIPART_BYTES)
        v.problems.push(
          `ARKVORY_MAX_UPLOAD_BYTES: at most ${S3_MAX_MULTIPART_BYTES} (10000 parts of 5 GiB, the most one S3 multipart upload holds) with an s3:// ARKVORY_STORAGE_URL, got "${maxUpload}"`,
        );
      const region = v.str('ARKVORY_S3_REGION');
      const endpoint = v.failed.has('ARKVORY_S3_ENDPOINT') ? undefined : v.optStr('ARKVORY_S3_ENDPOINT');
      // Requests go to `<origin>/<bucket>/<key>`: a path or query on the endpoint would be dropped.
      if (
        endpoint !== undefined &&
        (new URL(endpoint).pathname !== '/' || new URL(endpoint).search || new URL(endpoint).username)
      ) {
        v.problems.push(
          `ARKVORY_S3_ENDPOINT: expected an origin such as http://10.0.0.30:8333 (no path, query or credentials), got "${new URL(endpoint).origin}…"`,
        );
      }
      if (parsed.ok && accessKeyId && secretAccessKey && placeholders.length === 0) {
        s3 = {
          location: parsed.value,
          endpoint: v.optStr('ARKVORY_S3_ENDPOINT') ?? `https://s3.${region}.amazonaws.com`,
          region,
          credentials: { accessKeyId, secretAccessKey, sessionToken: v.env.AWS_SESSION_TOKEN || undefined },
        };
      }
    } else if (u.search || u.hash)
      v.problems.push(
        `ARKVORY_STORAGE_URL: expected a base URL without query or fragment (e.g. http://10.0.0.20:8081/arkvory/), got ${shown(v.known.get('ARKVORY_STORAGE_URL'), storageUrl)}`,
      );
    else if (v.optStr('ARKVORY_S3_ENDPOINT') !== undefined)
      v.problems.push('ARKVORY_S3_ENDPOINT: only used with an s3:// ARKVORY_STORAGE_URL');
  } else if (v.optStr('ARKVORY_S3_ENDPOINT') !== undefined)
    v.problems.push('ARKVORY_S3_ENDPOINT: only used with an s3:// ARKVORY_STORAGE_URL');
  const redisUrl = v.optStr('ARKVORY_REDIS_URL');
  if (redisUrl !== undefined) {
    const parsed = parseRedisTarget(redisUrl);
    if (!parsed.ok) v.problems.push(`ARKVORY_REDIS_URL: ${parsed.problem}, got "<redacted>"`);
    // A brace in the prefix would become the hash tag of every key and put them all in one slot.
    else if (parsed.target.kind === 'cluster' && /[{}]/.test(v.str('ARKVORY_REDIS_KEY_PREFIX')))
      v.problems.push(
        `ARKVORY_REDIS_KEY_PREFIX: must not contain { or } with a Redis Cluster (keys carry their own hash tags), got ${JSON.stringify(v.str('ARKVORY_REDIS_KEY_PREFIX'))}`,
      );
  }
  // Unset: nobody, in every role. A peer is trusted to name the client only when listed: loopback is
  // not a proxy by itself (any local process, SSH or kubectl port-forward, a TCP tunnel or TLS
  // terminator passes a client's own X-Forwarded-For on from there).
  let publicUrl: string | undefined;
  const publicText = v.optStr('ARKVORY_PUBLIC_URL');
  if (publicText !== undefined) {
    const parsed = parsePublicUrl(publicText);
    if (parsed.ok) publicUrl = parsed.value;
    else v.problems.push(`ARKVORY_PUBLIC_URL: ${parsed.problem}`);
  }
  const trusted = parseTrustedProxies(v.optStr('ARKVORY_TRUSTED_PROXIES'));
  if (trusted.ok) trustedProxies = trusted.value;
  else v.problems.push(`ARKVORY_TRUSTED_PROXIES: ${trusted.problem}`);
  const backends = v.optStr('ARKVORY_ROUTER_BACKENDS');
  if (backends !== undefined) {
    const parsed = parseBackendList(backends);
    if (role === undefined) {
      if (!parsed.ok) v.problems.push(`ARKVORY_ROUTER_BACKENDS: ${parsed.problem}`);
    } else if (role !== 'router')
      v.problems.push(`ARKVORY_ROUTER_BACKENDS: only valid with ARKVORY_ROLE=router, got role "${role}"`);
    else if (!parsed.ok) v.problems.push(`ARKVORY_ROUTER_BACKENDS: ${parsed.problem}`);
    else routerBackends = parsed.value;
  } else if (
    role === 'router' &&
    v.optStr('ARKVORY_DATABASE_URL') === undefined &&
    !v.failed.has('ARKVORY_DATABASE_URL')
  ) {
    v.problems.push(
      'ARKVORY_ROLE: "router" finds its gateways in the lease table (set ARKVORY_DATABASE_URL) or in a static list (set ARKVORY_ROUTER_BACKENDS)',
    );
  }
  return { advertiseUrl, s3, trustedProxies, routerBackends, publicUrl };
}

/** ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: principal names, deduplicated. */
export function checkBypassPublishers(v: VariableValues): string[] {
  const bypassPublishers: string[] = [];
  const raw = v.optStr('ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS');
  for (const name of raw === undefined ? [] : raw.split(',').map((n) => n.trim())) {
    if (!/^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$/.test(name))
      v.problems.push(
        `ARKVORY_RATE_LIMIT_BYPASS_PUBLISHERS: expected comma-separated principal names, got ${shown(undefined, name)}`,
      );
    else if (!bypassPublishers.includes(name)) bypassPublishers.push(name);
  }
  return bypassPublishers;
}

/** ARKVORY_SERVICE_NAME's form, and the database a rules service needs. */
export function checkServiceName(v: VariableValues): void {
  const serviceName = v.str('ARKVORY_SERVICE_NAME');
  if (!v.failed.has('ARKVORY_SERVICE_NAME') && !/^[a-z0-9][a-z0-9_.-]{0,63}$/.test(serviceName))
    v.problems.push(`ARKVORY_SERVICE_NAME: expected ^[a-z0-9][a-z0-9_.-]{0,63}$, got ${JSON.stringify(serviceName)}`);
  if (
    v.str('ARKVORY_ROLE') === 'rules-service' &&
    v.optStr('ARKVORY_DATABASE_URL') === undefined &&
    !v.failed.has('ARKVORY_DATABASE_URL')
  )
    v.problems.push('ARKVORY_ROLE: "rules-service" keeps its overrides in PostgreSQL; set ARKVORY_DATABASE_URL');
}

/** Run once every value is valid: a request waiting for its slot moves no byte, so idle timeouts must outlast that wait. */
export function checkIdleTimeouts(v: VariableValues): void {
  // A request waiting for its slot moves no byte: the idle timeouts must outlast that wait.
  const wait = v.num('ARKVORY_ADMISSION_WAIT_SECONDS');
  for (const name of ['ARKVORY_BODY_TIMEOUT_SECONDS', 'ARKVORY_SEND_TIMEOUT_SECONDS']) {
    if (v.num(name) <= wait)
      v.problems.push(
        `${name}: expected more than ARKVORY_ADMISSION_WAIT_SECONDS (${wait}), or a queued request is cut before its slot comes; got "${v.num(name)}"`,
      );
  }
}

/**
 * ARKVORY_WORKERS above 1 where the instance's limits stay exact (proxy/workers/, worker-count.ts):
 * a writer or a reader (standalone or in the shared profile) on a PostgreSQL of its own choosing,
 * since the embedded database is one process's; or a router. `auto` never asks for more than that.
 * A connection bound (ARKVORY_MAX_CONNECTIONS) is split between the workers, so it must cover them.
 */
export function checkWorkers(v: VariableValues): void {
  if (v.anyFailed('ARKVORY_WORKERS', 'ARKVORY_ROLE', 'ARKVORY_DATABASE_URL', 'ARKVORY_MAX_CONNECTIONS')) return;
  const workers = v.values.get('ARKVORY_WORKERS') as WorkersSetting;
  if (workers === 'auto' || workers === 1) return;
  const role = v.str('ARKVORY_ROLE');
  if (runsOnWorkers(role, v.optStr('ARKVORY_DATABASE_URL') !== undefined)) {
    // Each worker serves floor(bound / N) of the instance's bound: below N some would serve none.
    const maxConnections = v.optNum('ARKVORY_MAX_CONNECTIONS');
    if (maxConnections !== undefined && maxConnections < workers)
      v.problems.push(
        `ARKVORY_MAX_CONNECTIONS: the instance's bound, shared by its workers, must be at least ARKVORY_WORKERS (${workers}); got ${maxConnections}`,
      );
    return;
  }
  v.problems.push(
    role === 'api' || role === 'reader'
      ? `ARKVORY_WORKERS: above 1 needs ARKVORY_DATABASE_URL (the embedded PostgreSQL belongs to one process); got ${workers}`
      : `ARKVORY_WORKERS: above 1 only for ARKVORY_ROLE=api, reader or router (the roles that serve clients); got ${workers} with role "${role}"`,
  );
}
