import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, inject } from 'vitest';

export interface TestRedis {
  url: string;
  /** Unique per test file, e.g. `arkvory:t:1a2b3c:`; every key this file makes starts with it. */
  prefix: string;
  client: Redis;
}

export async function deleteKeysWithPrefix(client: Redis, prefix: string): Promise<number> {
  let cursor = '0';
  let deleted = 0;
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
    cursor = next;
    if (keys.length) deleted += await client.del(...keys);
  } while (cursor !== '0');
  return deleted;
}

/** A Redis client and a fresh key prefix for the test file; keys under the prefix are deleted after. */
export function useTestRedis(): TestRedis {
  const holder = {} as TestRedis;
  beforeAll(async () => {
    holder.url = inject('redisUrl');
    holder.prefix = `arkvory:t:${randomBytes(6).toString('hex')}:`;
    const { Redis } = await import('ioredis'); // loaded by the files that use Redis only
    holder.client = new Redis(holder.url, { maxRetriesPerRequest: 1 });
    await holder.client.ping();
  });
  afterAll(async () => {
    if (!holder.client) return;
    await deleteKeysWithPrefix(holder.client, holder.prefix);
    holder.client.disconnect();
  });
  return holder;
}
