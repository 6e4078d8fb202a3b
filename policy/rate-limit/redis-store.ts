/**
 * Counters in Redis: one `check.lua` evaluation per check, through ioredis `defineCommand` (EVALSHA,
 * falling back to EVAL when the server answers NOSCRIPT, e.g. after a restart or SCRIPT FLUSH).
 * Timeouts and fail-open are the limiter's job; this module only talks to Redis.
 */
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import type { Mode, Outcome, Plan } from './evaluate.ts';
import type { CounterStore } from './store.ts';

export const CHECK_SCRIPT = readFileSync(new URL('./check.lua', import.meta.url), 'utf8');
const COMMAND = 'arkvoryRateLimitCheck';

type ScriptReply = Array<string | number>;
type WithCheck = Redis & { [COMMAND](numKeys: number, ...args: Array<string | number>): Promise<ScriptReply> };

export function createRedisStore(redis: Redis): CounterStore {
  if (!(COMMAND in redis)) redis.defineCommand(COMMAND, { lua: CHECK_SCRIPT });
  const client = redis as WithCheck;
  return {
    kind: 'redis',
    async run(plan: Plan, input: { nowMs: number; cost: number; mode: Mode }): Promise<Outcome[]> {
      const n = plan.counting.length;
      const args: Array<string | number> = [];
      for (const p of plan.counting) args.push(p.counterKey, p.banKey);
      args.push(input.nowMs, String(input.cost), input.mode, n);
      for (const p of plan.counting) args.push(p.action, p.limit, p.windowEndMs, p.banMs, p.distinctValue !== undefined ? '1' : '0', p.distinctValue ?? '');
      const reply = await client[COMMAND](n * 2, ...args);
      const outcomes: Outcome[] = [];
      for (let i = 0; i + 3 < reply.length; i += 4) outcomes.push({ count: Number(reply[i]), exceeded: reply[i + 1] === 1, banned: reply[i + 2] === 1, resetAtMs: Number(reply[i + 3]) });
      return outcomes;
    },
    async clear(keys) {
      if (keys.length) await redis.del(...keys);
    },
  };
}
