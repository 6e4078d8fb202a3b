/**
 * Counters in Redis, through ioredis `defineCommand` (EVALSHA, falling back to EVAL when the server
 * answers NOSCRIPT, e.g. after a restart or SCRIPT FLUSH).
 *
 * `check.lua` is the whole algorithm, one call per check. Most checks are simpler (plain counters,
 * no ban, integer cost, not a peek): those are gathered for one turn of the event loop and sent
 * together to `count.lua`, one call for the batch. Per check that saves an ioredis command, its timer and reply
 * parsing in Node, and a script invocation in Redis, which is most of the cost of a check; each
 * check stays atomic (a script runs alone) and decides exactly as check.lua would. Peeks, which
 * only read, are batched the same way through `peek.lua`.
 * Fail-open is the limiter's job. The wait is bounded here (`boundsOwnWait`): a batch's script call
 * has one timer, and when it fires every check of the batch fails with `store_timeout` (the timer
 * starts as the batch is sent, at most one turn of the event loop after its first check).
 */
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { RateLimitError } from './errors.ts';
import { storeTimeout, withTimeout } from './timeout.ts';
import { evaluate, KEY_SLACK_MS, type Mode, type Outcome, type Plan, type RuleState } from './evaluate.ts';
import type { CounterStore } from './counter-store.ts';

export const CHECK_SCRIPT = readFileSync(new URL('./check.lua', import.meta.url), 'utf8');
export const COUNT_SCRIPT = readFileSync(new URL('./count.lua', import.meta.url), 'utf8');
export const PEEK_SCRIPT = readFileSync(new URL('./peek.lua', import.meta.url), 'utf8');
// Stryker disable next-line StringLiteral: equivalent: the check script's name only has to be its own (the two batched ones are named in the auto-pipelining exclusions, tested)
const CHECK = 'arkvoryRateLimitCheck';
const COUNT = 'arkvoryRateLimitCount';
const PEEK = 'arkvoryRateLimitPeek';
/** Checks per count.lua call: bounds how long one call holds Redis (about a microsecond each). */
export const MAX_BATCH = 256;

type ScriptReply = Array<string | number>;

/**
 * A script's reply as the scripts write it: an array of `length` numbers (integers, or numbers as
 * strings; peek.lua passes on stored values, which its caller checks per peek). Anything else (a proxy in between answering for Redis, a reply cut short) is an error
 * of the store, never counts read as NaN or an exception thrown where no one catches it.
 */
function unexpectedReply(reply: unknown, length: (n: number) => boolean, numbers = true): RateLimitError | undefined {
  if (Array.isArray(reply) && length(reply.length)) {
    let ok = true;
    for (const v of reply)
      if ((typeof v !== 'number' && typeof v !== 'string') || (numbers && !Number.isFinite(Number(v)))) ok = false;
    if (ok) return undefined;
  }
  return new RateLimitError('store_unavailable', 'the rate-limit store answered a script with an unexpected reply');
}
type RunInput = Parameters<CounterStore['run']>[1];

/** `work`, failing with `store_timeout` past `timeoutMs` when one is given. */
const bounded = <T>(work: Promise<T>, timeoutMs: number | undefined): Promise<T> =>
  timeoutMs === undefined ? work : withTimeout(work, timeoutMs);

type Script = (numKeys: number, ...args: Array<string | number>) => Promise<ScriptReply>;
type WithScripts = (Redis | Cluster) & { [CHECK]: Script; [COUNT]: Script; [PEEK]: Script };

interface Queued {
  readonly plan: Plan;
  readonly nowMs: number;
  readonly cost: number;
  readonly timeoutMs: number | undefined;
  readonly resolve: (outcomes: Outcome[]) => void;
  readonly reject: (err: unknown) => void;
}

/** Whether `count.lua` decides this check exactly as `check.lua` would. */
export function takesFastPath(plan: Plan, cost: number, mode: Mode): boolean {
  if (mode !== 'check' || !Number.isSafeInteger(cost)) return false;
  for (const p of plan.counting) if (p.banMs > 0 || p.distinctValue !== undefined) return false;
  return true;
}

/**
 * Arms the deadline of one batched script call: the shortest `timeoutMs` of its checks (none when
 * none has one). When it fires, every check of the batch is rejected with `store_timeout`; an answer
 * after that settles nothing (its checks have failed already). The function returned clears the
 * timer once the answer came.
 */
function batchDeadline<Q extends { reject(err: unknown): void }>(
  batch: readonly Q[],
  timeoutOf: (q: Q) => number | undefined,
): () => void {
  let ms = Number.POSITIVE_INFINITY;
  for (const q of batch) {
    const timeoutMs = timeoutOf(q);
    // Stryker disable next-line EqualityOperator: equivalent: taking an equal timeout again leaves the shortest as it is
    if (timeoutMs !== undefined && timeoutMs < ms) ms = timeoutMs;
  }
  if (ms === Number.POSITIVE_INFINITY) return noTimer;
  const timer = setTimeout(() => {
    const err = storeTimeout(ms);
    for (const q of batch) q.reject(err);
  }, ms);
  return () => clearTimeout(timer);
}
const noTimer = (): void => {};

export function createRedisCounterStore(redis: Redis | Cluster): CounterStore {
  // A client shared by several stores defines each script once (defining it again would be harmless).
  // Stryker disable ConditionalExpression: equivalent: redefining a command with the same script changes nothing; never defining it (→ false) is killed
  if (!(CHECK in redis)) redis.defineCommand(CHECK, { lua: CHECK_SCRIPT });
  if (!(COUNT in redis)) redis.defineCommand(COUNT, { lua: COUNT_SCRIPT });
  if (!(PEEK in redis)) redis.defineCommand(PEEK, { lua: PEEK_SCRIPT });
  // Stryker restore ConditionalExpression
  // The store batches count.lua calls itself (one per turn of the event loop); ioredis's auto-pipelining on top would
  // only add a Pipeline object and a deferral to each of them.
  // A new array: ioredis's default one is shared by every client.
  // Stryker disable next-line ArrayDeclaration: equivalent: ioredis always sets the option (default []); the fallback only satisfies its optional type
  const ignored = redis.options.autoPipeliningIgnoredCommands ?? [];
  const own = [COUNT, PEEK].filter((c) => !ignored.includes(c));
  // Stryker disable next-line ConditionalExpression: equivalent: with nothing to add, the new array equals the old one (never adding, → false, is killed)
  if (own.length) redis.options.autoPipeliningIgnoredCommands = [...ignored, ...own];
  const client = redis as WithScripts;
  let queue: Queued[] = [];

  const send = (batch: readonly Queued[]): void => {
    const keys: Array<string | number> = [];
    const argv: Array<string | number> = [];
    for (const q of batch) {
      argv.push(q.cost, q.plan.counting.length);
      for (const p of q.plan.counting) {
        keys.push(p.counterKey);
        argv.push(Math.max(1, p.windowEndMs + KEY_SLACK_MS - q.nowMs), p.action === 'limit' ? p.limit : -1);
      }
    }
    const clearDeadline = batchDeadline(batch, (q) => q.timeoutMs);
    client[COUNT](keys.length, ...keys, ...argv).then(
      (reply) => {
        clearDeadline();
        const bad = unexpectedReply(reply, (n) => n === keys.length);
        if (bad) {
          for (const q of batch) q.reject(bad);
          return;
        }
        let at = 0;
        for (const q of batch) {
          const outcomes: Outcome[] = [];
          let failed = false;
          for (const p of q.plan.counting) {
            const c = Number(reply[at++]);
            if (c === -2) failed = true;
            if (c < 0) continue;
            outcomes.push({ count: c, exceeded: c > p.limit, banned: false, resetAtMs: p.windowEndMs });
          }
          if (failed)
            q.reject(
              new RateLimitError('store_unavailable', 'a rate-limit counter key holds a value that cannot be counted'),
            );
          else q.resolve(outcomes);
        }
      },
      (err: unknown) => {
        clearDeadline();
        for (const q of batch) q.reject(err);
      },
    );
  };

  const flush = (): void => {
    const all = queue;
    queue = [];
    // Stryker disable next-line EqualityOperator: equivalent: at i === length the batch is empty and the script call counts nothing
    for (let i = 0; i < all.length; i += MAX_BATCH) send(all.slice(i, i + MAX_BATCH));
  };

  const count = (plan: Plan, nowMs: number, cost: number, timeoutMs: number | undefined): Promise<Outcome[]> =>
    new Promise((resolve, reject) => {
      // setImmediate runs once this turn of the event loop has handled every socket that was ready:
      // the checks of all the requests read in it join one batch. (A nextTick batch would close
      // after each socket's callback: under load, one or two checks per script call.)
      // Stryker disable next-line ConditionalExpression: equivalent: a flush scheduled per check finds the queue emptied by the first one; never flushing (→ false) is killed
      if (queue.length === 0) setImmediate(flush);
      queue.push({ plan, nowMs, cost, timeoutMs, resolve, reject });
    });

  // Peeks (auth failures before every authentication, transfer volume before every transfer) only
  // read: a batch per turn of the event loop reads every rule's state in one peek.lua call, and evaluate.ts decides
  // each peek from that state, as the memory store does and as check.lua does in 'peek' mode.
  interface QueuedPeek {
    readonly plan: Plan;
    readonly input: RunInput;
    readonly resolve: (outcomes: Outcome[]) => void;
    readonly reject: (err: unknown) => void;
  }
  let peeks: QueuedPeek[] = [];
  const sendPeeks = (batch: readonly QueuedPeek[]): void => {
    const keys: string[] = [];
    const argv: string[] = [];
    for (const q of batch) {
      for (const p of q.plan.counting) {
        keys.push(p.counterKey, p.banKey);
        // peek.lua tests each flag for '1' only; the member is read for distinct rules only.
        argv.push(
          // Stryker disable next-line StringLiteral: equivalent: any value but '1' means not distinct ('1' → "" is killed)
          p.distinctValue !== undefined ? '1' : '0',
          // Stryker disable next-line StringLiteral: equivalent: the member of a plain rule is never read
          p.distinctValue ?? '',
          // Stryker disable next-line ConditionalExpression,EqualityOperator,StringLiteral: equivalent: a ban read for a rule without ban_for_s is ignored by evaluate.ts, and any value but '1' means no ban ('1' → "" and → false are killed)
          p.banMs > 0 ? '1' : '0',
        );
      }
    }
    const clearDeadline = batchDeadline(batch, (q) => q.input.timeoutMs);
    client[PEEK](keys.length, ...keys, ...argv).then(
      (reply) => {
        clearDeadline();
        // Three values per rule, a rule per two keys; a value that is no number fails only its own peek (below).
        const bad = unexpectedReply(reply, (n) => n === (keys.length / 2) * 3, false);
        if (bad) {
          for (const q of batch) q.reject(bad);
          return;
        }
        let at = 0;
        for (const q of batch) {
          const states: RuleState[] = q.plan.counting.map(() => {
            const state = {
              count: Number(reply[at]),
              banUntilMs: Number(reply[at + 1]),
              isMember: Number(reply[at + 2]) === 1,
            };
            at += 3;
            return state;
          });
          if (states.some((st) => !Number.isFinite(st.count) || !Number.isFinite(st.banUntilMs)))
            q.reject(
              new RateLimitError('store_unavailable', 'a rate-limit counter key holds a value that cannot be counted'),
            );
          else q.resolve(evaluate(q.plan, states, q.input).outcomes);
        }
      },
      (err: unknown) => {
        clearDeadline();
        for (const q of batch) q.reject(err);
      },
    );
  };
  const flushPeeks = (): void => {
    const all = peeks;
    peeks = [];
    // Stryker disable next-line EqualityOperator: equivalent: at i === length the batch is empty and the script call reads nothing
    for (let i = 0; i < all.length; i += MAX_BATCH) sendPeeks(all.slice(i, i + MAX_BATCH));
  };
  const peek = (plan: Plan, input: RunInput): Promise<Outcome[]> =>
    new Promise((resolve, reject) => {
      // Stryker disable next-line ConditionalExpression: equivalent: as for count batches above; never flushing is killed
      if (peeks.length === 0) setImmediate(flushPeeks);
      peeks.push({ plan, input, resolve, reject });
    });

  const check = async (plan: Plan, input: { nowMs: number; cost: number; mode: Mode }): Promise<Outcome[]> => {
    const n = plan.counting.length;
    const args: Array<string | number> = [];
    for (const p of plan.counting) args.push(p.counterKey, p.banKey);
    args.push(input.nowMs, String(input.cost), input.mode, n);
    for (const p of plan.counting)
      args.push(
        p.action,
        p.limit,
        p.windowEndMs,
        p.banMs,
        // Stryker disable next-line StringLiteral: equivalent: check.lua tests the flag for '1' only ('1' → "" is killed)
        p.distinctValue !== undefined ? '1' : '0',
        // Stryker disable next-line StringLiteral: equivalent: the member of a plain rule is never read
        p.distinctValue ?? '',
      );
    const reply = await client[CHECK](n * 2, ...args);
    // Four values per evaluated rule (the loop may stop early, never before the first rule).
    const bad = unexpectedReply(reply, (len) => len > 0 && len <= 4 * n && len % 4 === 0);
    if (bad) throw bad;
    const outcomes: Outcome[] = [];
    // Stryker disable next-line EqualityOperator: equivalent: the reply holds four values per rule, so i + 3 never equals its length
    for (let i = 0; i + 3 < reply.length; i += 4)
      outcomes.push({
        count: Number(reply[i]),
        exceeded: reply[i + 1] === 1,
        banned: reply[i + 2] === 1,
        resetAtMs: Number(reply[i + 3]),
      });
    return outcomes;
  };

  /**
   * Redis Cluster: a script may only touch keys of one slot, and a rule's counter and ban share a
   * hash tag (keys.ts) but different rules do not. So each rule runs alone through check.lua, in
   * rule order, and the loop stops where the one-script evaluation would (a `limit` rule exceeded).
   * Each rule's count, ban and verdict are exactly the single-server ones; what is given up is the
   * atomicity of one check across its rules (a concurrent check may interleave between two rules,
   * as if the checks arrived in a different order per rule) and one round trip per rule.
   */
  const checkPerRule = async (plan: Plan, input: { nowMs: number; cost: number; mode: Mode }): Promise<Outcome[]> => {
    const outcomes: Outcome[] = [];
    for (const rule of plan.counting) {
      const [outcome] = await check({ ...plan, counting: [rule] }, input);
      if (!outcome) break;
      outcomes.push(outcome);
      if (outcome.exceeded && rule.action === 'limit') break;
    }
    return outcomes;
  };

  return {
    kind: 'redis',
    boundsOwnWait: true,
    run(plan, input) {
      if (redis.isCluster) return bounded(checkPerRule(plan, input), input.timeoutMs);
      if (input.mode === 'peek') return peek(plan, input);
      return takesFastPath(plan, input.cost, input.mode)
        ? count(plan, input.nowMs, input.cost, input.timeoutMs)
        : bounded(check(plan, input), input.timeoutMs);
    },
    async clear(keys) {
      if (keys.length === 0) return;
      // One DEL per key in a cluster: the keys of different rules live in different slots.
      // Stryker disable next-line ConditionalExpression: equivalent on one server (the only one the mutation suite has): one DEL per key deletes the same keys; the cluster path itself is tested by counting DELs
      if (redis.isCluster) await Promise.all(keys.map((k) => redis.del(k)));
      else await redis.del(...keys);
    },
  };
}
