/**
 * What a failed rule-document write says it did (the failure modes a real server cannot be made to
 * show on demand: a refused script, a connection lost with the script sent). Redis being down is
 * tested over HTTP in proxy/admin/rate-limit-store-down.int.test.ts.
 */
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { writeWithin } from './bounded-write.ts';
import { createRedisRuleDocuments } from './redis-rule-documents.ts';
import { emptyDocument } from './rules.ts';

function fakeRedis(options: { status?: string; mget?: () => Promise<unknown>; cas?: () => Promise<number> }) {
  const calls = { cas: 0 };
  const client = {
    status: options.status ?? 'ready',
    defineCommand() {},
    mget: options.mget ?? (async () => [null]),
    async arkvoryRulesCas() {
      calls.cas++;
      return (options.cas ?? (async () => 1))();
    },
  };
  return { redis: client as unknown as Redis, calls };
}

const write = (redis: Redis) =>
  createRedisRuleDocuments(redis).update(['api'], () => new Map([['api', emptyDocument()]]));

describe('Redis rule documents: a failed write says whether it wrote', () => {
  it('a read that fails: store_unavailable (nothing was sent)', async () => {
    const { redis, calls } = fakeRedis({ mget: async () => Promise.reject(new Error('Connection is closed.')) });
    await expect(write(redis)).rejects.toMatchObject({ code: 'store_unavailable' });
    expect(calls.cas).toBe(0);
  });

  it('a connection that is not ready: store_unavailable, the script never sent', async () => {
    const { redis, calls } = fakeRedis({ status: 'reconnecting' });
    await expect(write(redis)).rejects.toMatchObject({ code: 'store_unavailable' });
    expect(calls.cas).toBe(0);
  });

  it('a script Redis refused (a reply error): store_unavailable', async () => {
    const refused = Object.assign(new Error('OOM command not allowed'), { name: 'ReplyError' });
    const { redis } = fakeRedis({ cas: async () => Promise.reject(refused) });
    await expect(write(redis)).rejects.toMatchObject({ code: 'store_unavailable' });
  });

  it('a connection lost with the script sent: store_outcome_unknown, not logged as a late answer', async () => {
    const { redis } = fakeRedis({ cas: async () => Promise.reject(new Error('Connection is closed.')) });
    await expect(write(redis)).rejects.toMatchObject({ code: 'store_outcome_unknown' });
    const lines: unknown[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const docs = createRedisRuleDocuments(redis);
    await expect(
      writeWithin((signal) => docs.update(['api'], () => new Map([['api', emptyDocument()]]), signal), 1000, log),
    ).rejects.toMatchObject({ code: 'store_outcome_unknown' });
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines).toEqual([]);
  });
});
