/**
 * `guardAuthGate` on an in-memory limiter and a hand-moved clock: what an untrusted forwarding peer
 * is charged for the clients it names, what refuses it, and what a success clears.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { PolicyError } from '../../policy/errors.ts';
import { createLimiter } from '../../policy/rate-limit/limiter.ts';
import { createMemoryCounterStore } from '../../policy/rate-limit/memory-counter-store.ts';
import { defineRule } from '../../policy/rate-limit/rules.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import type { Gate, RequestContext } from '../server/route-types.ts';
import { FORWARDER_SHARE } from './ban-identity.ts';
import { guardAuthGate } from './rate-limit-gate.ts';

/** The shipped rule's numbers. */
const BAN = defineRule({
  name: 'ban_ip_after_auth_failures',
  action: 'limit',
  characteristics: ['ip'],
  limit: 20,
  periodS: 60,
  banForS: 900,
});

function setup() {
  // At the start of a minute: every run below falls in one window of the rule.
  const clock = new ManualClock(1_700_000_040_000);
  const limiter = createLimiter(
    { store: createMemoryCounterStore(), clock, log: pino({ level: 'silent' }) },
    { name: 'auth_failure', rules: [BAN] },
  );
  const authGate: Gate = (ctx) => {
    if (ctx.req.headers.authorization !== 'Bearer good') throw new PolicyError('unauthorized');
    ctx.principal = { id: 'p' } as RequestContext['principal'];
    return undefined;
  };
  const gate = guardAuthGate(authGate, limiter, clock, createTrustedProxies(['127.0.0.1']));
  /** The status a request from `peer` naming `client` (if any) with `key` gets. */
  const send = async (peer: string, client: string | undefined, key: 'good' | 'bad'): Promise<number> => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}` };
    if (client !== undefined) headers['x-forwarded-for'] = client;
    const ctx = {
      access: 'read',
      req: { socket: { remoteAddress: peer }, headers },
      url: new URL('http://gw/api/v1/x'),
      log: pino({ level: 'silent' }),
      principal: undefined,
    } as unknown as RequestContext;
    try {
      await gate(ctx);
      return 200;
    } catch (err) {
      const code = (err as PolicyError).code;
      return code === 'rate_limited' ? 429 : code === 'unauthorized' ? 401 : 500;
    }
  };
  return { clock, limiter, send };
}

describe('guardAuthGate behind an untrusted forwarding peer', () => {
  it('charges the peer a share of each failure of a client it names: banned past 160, whatever it names then', async () => {
    const { send } = setup();
    const failures = 20 / FORWARDER_SHARE;
    expect(failures).toBe(160);
    for (let i = 0; i <= failures; i++) expect(await send('10.0.0.9', `198.18.${i >> 8}.${i & 255}`, 'bad')).toBe(401);
    expect(await send('10.0.0.9', '198.51.100.1', 'good')).toBe(429);
    expect(await send('10.0.0.9', undefined, 'good')).toBe(429);
    expect(await send('10.0.0.10', '198.51.100.1', 'good')).toBe(200);
    // A trusted proxy naming as many clients is never charged.
    for (let i = 0; i <= failures; i++) expect(await send('127.0.0.1', `198.18.${i >> 8}.${i & 255}`, 'bad')).toBe(401);
    expect(await send('127.0.0.1', '198.51.100.1', 'good')).toBe(200);
    expect(await send('127.0.0.1', undefined, 'good')).toBe(200);
  });

  it("a client's success clears its own failures, not the share its peer was charged", async () => {
    const { clock, limiter, send } = setup();
    for (let i = 0; i < 20; i++) expect(await send('10.0.0.9', '198.51.100.1', 'bad')).toBe(401);
    expect(await send('10.0.0.9', '198.51.100.1', 'good')).toBe(200);
    const of = async (ip: string) => (await limiter.peek({ ip }, { cost: 0 })).evaluations[0]?.count;
    expect(await of('by=10.0.0.9;for=198.51.100.1')).toBe(0);
    expect(await of('10.0.0.9')).toBe(20 * FORWARDER_SHARE);
    // The peer's share ends with its window, like any count.
    clock.advance(60_000);
    expect(await of('10.0.0.9')).toBe(0);
  });

  it('a banned client named by the peer is refused before its key is looked at, and costs the peer nothing more', async () => {
    const { limiter, send } = setup();
    for (let i = 0; i < 21; i++) expect(await send('10.0.0.9', '198.51.100.1', 'bad')).toBe(401);
    for (let i = 0; i < 5; i++) expect(await send('10.0.0.9', '198.51.100.1', 'bad')).toBe(429);
    expect((await limiter.peek({ ip: '10.0.0.9' }, { cost: 0 })).evaluations[0]?.count).toBe(21 * FORWARDER_SHARE);
    expect(await send('10.0.0.9', '198.51.100.2', 'good')).toBe(200);
  });
});
