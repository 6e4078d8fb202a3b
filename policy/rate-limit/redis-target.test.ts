import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../proxy/config/config.ts';
import { parseRedisTarget, redactRedisTarget, ruleDocumentsPrefix } from './redis-target.ts';

describe('ARKVORY_REDIS_URL: one server or Redis Cluster seeds', () => {
  it('reads one URL as a single server, unchanged', () => {
    expect(parseRedisTarget('redis://:pw@redis.internal:6379/2')).toEqual({
      ok: true,
      target: { kind: 'single', url: 'redis://:pw@redis.internal:6379/2' },
    });
  });

  it('a rediss:// URL reaches the client as TLS however its scheme is written; no query turns TLS off', () => {
    // ioredis turns TLS on only for a URL starting with `rediss://` in lower case, and reads the
    // query as its options: `REDISS://` or `?tls=` connected in clear, the password sent in it.
    for (const url of ['REDISS://:pw@redis.internal:6380/1', 'Rediss://redis.internal:6380']) {
      const parsed = parseRedisTarget(url);
      if (!parsed.ok || parsed.target.kind !== 'single') throw new Error(`not one server: ${JSON.stringify(parsed)}`);
      const client = new Redis(parsed.target.url, { lazyConnect: true });
      expect([url, Boolean(client.options.tls), client.options.host, client.options.db]).toEqual([
        url,
        true,
        'redis.internal',
        url.endsWith('/1') ? 1 : 0,
      ]);
      client.disconnect();
    }
    for (const url of ['rediss://redis.internal:6380/?tls=', 'rediss://redis.internal:6380/?tls=false&db=1'])
      expect(parseRedisTarget(url)).toMatchObject({ ok: false, problem: expect.stringContaining('tls=') });
  });

  it('reads two or more comma-separated URLs as cluster seeds with one set of credentials', () => {
    expect(
      parseRedisTarget(
        'rediss://app:s%40cret@10.0.0.31:7000, rediss://app:s%40cret@10.0.0.32:7000,rediss://app:s%40cret@[fd00::33]',
      ),
    ).toEqual({
      ok: true,
      target: {
        kind: 'cluster',
        nodes: [
          { host: '10.0.0.31', port: 7000 },
          { host: '10.0.0.32', port: 7000 },
          { host: 'fd00::33', port: 6379 },
        ],
        username: 'app',
        password: 's@cret',
        tls: true,
      },
    });
  });

  it('refuses seeds that disagree, name a database, or are not Redis URLs', () => {
    expect(parseRedisTarget('redis://a:1,rediss://b:2')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('seed 2 differs'),
    });
    expect(parseRedisTarget('redis://:x@a:1,redis://:y@b:2')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('credentials'),
    });
    expect(parseRedisTarget('redis://a:1/3,redis://b:2/3')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('only database 0'),
    });
    expect(parseRedisTarget('redis://a:1,http://b:2')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('entry 2 has scheme http://'),
    });
    expect(parseRedisTarget('redis://a:1,')).toMatchObject({
      ok: false,
      problem: expect.stringContaining('entry 2 is not a URL'),
    });
  });

  it('keeps rule documents in one slot on a cluster and under the historical names otherwise', () => {
    expect(ruleDocumentsPrefix('arkvory:', true)).toBe('arkvory:{ratelimit:rules}:');
    expect(ruleDocumentsPrefix('arkvory:', false)).toBe('arkvory:ratelimit:rules:');
  });

  it('redacts every password of a seed list, in the user info or the query', () => {
    expect(redactRedisTarget('redis://:one@a:1,redis://:one@b:2')).toBe(
      'redis://<redacted>@a:1,redis://<redacted>@b:2',
    );
    expect(redactRedisTarget('redis://127.0.0.1:1/0?password=RedisQueryS3cret')).toBe(
      'redis://127.0.0.1:1/0?<redacted>',
    );
  });

  it('is validated once at start: a bad seed list or a brace in the key prefix stops the process, naming the variable', () => {
    expect(() => loadConfig({ ARKVORY_REDIS_URL: 'redis://a:1,redis://b:2/5' })).toThrow(
      /ARKVORY_REDIS_URL: Redis Cluster seed 2 names database 5/,
    );
    expect(() =>
      loadConfig({ ARKVORY_REDIS_URL: 'redis://a:1,redis://b:2', ARKVORY_REDIS_KEY_PREFIX: 'app{x}:' }),
    ).toThrow(/ARKVORY_REDIS_KEY_PREFIX: must not contain \{ or \}/);
    expect(() => loadConfig({ ARKVORY_REDIS_URL: 'redis://a:1,ftp://b' })).toThrow(
      /ARKVORY_REDIS_URL: expected a URL with scheme redis:\/\/ or rediss:\/\/, or a comma-separated list of them, got <redacted>/,
    );
    expect(loadConfig({ ARKVORY_REDIS_URL: 'redis://a:1,redis://b:2' }).redisUrl).toBe('redis://a:1,redis://b:2');
  });
});
