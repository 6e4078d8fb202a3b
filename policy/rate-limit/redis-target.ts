/**
 * What `ARKVORY_REDIS_URL` names, pure: one Redis server (`redis://host:6379/2`), or a Redis Cluster
 * given by two or more seed nodes, comma-separated (`redis://10.0.0.31:7000,redis://10.0.0.32:7000`).
 * The client learns the other nodes and the slot map from any seed that answers, so listing seeds
 * on different hosts lets a gateway start while one of them is down.
 *
 * A cluster has only database 0 and one set of credentials: every seed must use the same scheme,
 * user and password, and no database other than 0.
 */
import { redactUrlList } from '../../lib/redact-url.ts';

export type RedisTarget =
  | { readonly kind: 'single'; readonly url: string }
  | {
      readonly kind: 'cluster';
      readonly nodes: ReadonlyArray<{ readonly host: string; readonly port: number }>;
      readonly username: string | undefined;
      readonly password: string | undefined;
      readonly tls: boolean;
    };

export type ParsedRedisTarget = { ok: true; target: RedisTarget } | { ok: false; problem: string };

const PROTOCOLS = ['redis:', 'rediss:'];

export function parseRedisTarget(raw: string): ParsedRedisTarget {
  const parts = raw.split(',').map((p) => p.trim());
  const urls: URL[] = [];
  for (const [i, part] of parts.entries()) {
    let url: URL;
    try {
      url = new URL(part);
    } catch {
      return { ok: false, problem: `entry ${i + 1} is not a URL (expected redis://host:port or rediss://host:port)` };
    }
    if (!PROTOCOLS.includes(url.protocol))
      return {
        ok: false,
        problem: `entry ${i + 1} has scheme ${url.protocol.replace(':', '://')}; expected redis:// or rediss://`,
      };
    urls.push(url);
  }
  if (urls.length === 1) {
    const url = urls[0]!;
    // ioredis reads the query as its options, and a `tls` there replaces rediss://'s TLS (`tls=`: none).
    if (url.protocol === 'rediss:' && url.searchParams.has('tls'))
      return {
        ok: false,
        problem: 'a rediss:// URL with a tls= query parameter; remove it (rediss:// is TLS, verified)',
      };
    // The URL as parsed: ioredis turns TLS on only for one that starts with `rediss://` in lower case,
    // so `REDISS://` went in clear. WHATWG serialisation lower-cases the scheme and nothing else that counts.
    return { ok: true, target: { kind: 'single', url: url.href } };
  }
  const first = urls[0]!;
  for (const [i, url] of urls.entries()) {
    if (url.protocol !== first.protocol || url.username !== first.username || url.password !== first.password) {
      return {
        ok: false,
        problem: `Redis Cluster seed ${i + 1} differs from the first in scheme or credentials; a cluster has one set`,
      };
    }
    if (url.pathname !== '' && url.pathname !== '/' && url.pathname !== '/0')
      return {
        ok: false,
        problem: `Redis Cluster seed ${i + 1} names database ${url.pathname.slice(1)}; a cluster has only database 0`,
      };
    if (url.search || url.hash)
      return { ok: false, problem: `Redis Cluster seed ${i + 1} has a query or fragment; give host and port only` };
    if (!url.hostname) return { ok: false, problem: `Redis Cluster seed ${i + 1} has no host` };
  }
  return {
    ok: true,
    target: {
      kind: 'cluster',
      nodes: urls.map((u) => ({ host: u.hostname.replace(/^\[(.*)\]$/, '$1'), port: u.port ? Number(u.port) : 6379 })),
      username: first.username ? decodeURIComponent(first.username) : undefined,
      password: first.password ? decodeURIComponent(first.password) : undefined,
      tls: first.protocol === 'rediss:',
    },
  };
}

/**
 * Where rule documents live. In a cluster the documents, their index and orphan marks are read and
 * compare-and-set together, so they share one hash tag (one slot); a single server keeps the
 * historical names.
 */
export function ruleDocumentsPrefix(keyPrefix: string, cluster: boolean): string {
  return cluster ? `${keyPrefix}{ratelimit:rules}:` : `${keyPrefix}ratelimit:rules:`;
}

/**
 * A Redis URL list for messages and logs: user info and query (ioredis reads `?password=`) as
 * `<redacted>`.
 */
export function redactRedisTarget(raw: string): string {
  return redactUrlList(raw);
}
