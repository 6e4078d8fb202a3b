/**
 * The bound on refused console sign-ins in the audit trail (request-audit.ts `createRefusalAudit`),
 * against a real PostgreSQL: 5 a minute per client address, 60 a minute in all, and the next entry
 * recorded says how many were left out. The requests are the sink's view of them (an address, an
 * Authorization header); the gateway's own path to the sink is in audit.int.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { capturedLog } from '../../test/support/captured-log.ts';
import { createTrustedProxies } from '../router/forwarded.ts';
import type { RequestContext } from '../server/route-types.ts';
import { createRefusalAudit, REFUSAL_AUDIT } from './request-audit.ts';

const db = useTestDatabase();
const KEY = `ark_${'k'.repeat(16)}_${'S'.repeat(43)}`;

/** A refused sign-in from `address` as the sink sees it. */
function attempt(address: string): RequestContext {
  return {
    req: { headers: { authorization: `Bearer ${KEY}` }, socket: { remoteAddress: address } },
    reqId: randomUUID(),
    clientReqId: undefined,
    route: '/console/session',
    principal: undefined,
  } as unknown as RequestContext;
}

async function recorded(): Promise<Array<{ source: string; details: Record<string, number> }>> {
  const { rows } = await db.pool.query(
    `SELECT source, details FROM arkvory_audit_events WHERE action = 'console.sign_in_failed' ORDER BY id`,
  );
  await db.pool.query('DELETE FROM arkvory_audit_events');
  return rows;
}

describe('refused console sign-ins in the audit trail', () => {
  it('records 5 a minute per address and 60 in all; the next entry counts those left out', async () => {
    let nowMs = 1_000;
    const { log, lines } = capturedLog();
    const sink = createRefusalAudit({ pool: db.pool, log, trusted: createTrustedProxies([]), clock: () => nowMs });
    const refuse = (address: string) => sink(attempt(address), 'console.sign_in_failed', 'unauthorized');

    for (let i = 0; i < 8; i++) await refuse('192.0.2.1');
    // Another address has a bound of its own; two addresses of one IPv6 /64 share one.
    await refuse('192.0.2.2');
    for (let i = 0; i < 4; i++) await refuse(`2001:db8:1:2::${i + 1}`);
    await refuse('2001:db8:1:2::99');
    await refuse('2001:db8:1:2::100');
    const first = await recorded();
    expect(first.map((r) => r.source)).toEqual([
      ...Array(5).fill('192.0.2.1'),
      '192.0.2.2',
      '2001:db8:1:2::1',
      '2001:db8:1:2::2',
      '2001:db8:1:2::3',
      '2001:db8:1:2::4',
      '2001:db8:1:2::99',
    ]);
    expect(first.every((r) => JSON.stringify(r.details) === '{"code":"unauthorized"}')).toBe(true);

    // A minute on, the address's next entry says how many of its attempts were left out.
    nowMs += 60_000;
    await refuse('192.0.2.1');
    await refuse('2001:db8:1:2::5');
    expect((await recorded()).map((r) => r.details)).toEqual([
      { code: 'unauthorized', suppressed: 3 },
      { code: 'unauthorized', suppressed: 1 },
    ]);

    // Many addresses at once: 60 a minute in all (two were taken above), the rest counted.
    for (let i = 0; i < REFUSAL_AUDIT.perMinute + 3; i++) await refuse(`198.51.100.${i + 1}`);
    expect((await recorded()).length).toBe(REFUSAL_AUDIT.perMinute - 2);
    nowMs += 60_000;
    await refuse('203.0.113.9');
    expect((await recorded()).map((r) => r.details)).toEqual([{ code: 'unauthorized', suppressedOverall: 5 }]);
    expect(lines.filter((l) => l.msg === 'audit entry not recorded')).toEqual([]);
  });

  it('the table admits an anonymous actor (migration 0086), and still no other kind nor one naming someone', async () => {
    const insert = (kind: string, operator: string | null) =>
      db.pool.query(
        `INSERT INTO arkvory_audit_events (action, actor_kind, operator, host, source) VALUES ('console.sign_in_failed', $1, $2, NULL, 'x')`,
        [kind, operator],
      );
    await insert('anonymous', null);
    await expect(insert('nobody', null)).rejects.toThrow(/check constraint/);
    await expect(insert('anonymous', 'someone')).rejects.toThrow(/check constraint/);
    await db.pool.query('DELETE FROM arkvory_audit_events');
  });
});
