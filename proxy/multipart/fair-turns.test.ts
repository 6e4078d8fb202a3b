import { describe, expect, it } from 'vitest';
import { FairTurns, type QueueHead } from './fair-turns.ts';

/** Drains a queue of jobs (id order = arrival) the way the worker does: heads, pick, run. */
function drain(queue: QueueHead[], turns = new FairTurns()): string[] {
  const order: string[] = [];
  const left = [...queue];
  while (left.length > 0) {
    const heads = new Map<string, QueueHead>();
    for (const job of left) if (!heads.has(job.principal)) heads.set(job.principal, job);
    const chosen = turns.next([...heads.values()])!;
    order.push(chosen.jobId);
    left.splice(left.indexOf(chosen), 1);
  }
  return order;
}

const jobs = (principal: string, from: number, count: number): QueueHead[] =>
  Array.from({ length: count }, (_, i) => ({ jobId: String(from + i), principal }));

describe('FairTurns', () => {
  it('runs another principal after at most one job of a principal with 200 queued', () => {
    const order = drain([...jobs('a', 1, 200), { jobId: '201', principal: 'b' }]);
    expect(order.indexOf('201')).toBeLessThanOrEqual(1);
    expect(order).toHaveLength(201);
  });

  it('alternates between principals, oldest job first within each', () => {
    const order = drain([...jobs('a', 1, 3), ...jobs('b', 4, 3), ...jobs('c', 7, 1)]);
    expect(order).toEqual(['1', '4', '7', '2', '5', '3', '6']);
  });

  it('gives a newcomer the next turn even when the running principal has had many', () => {
    const turns = new FairTurns();
    for (let i = 1; i <= 5; i++) expect(turns.next([{ jobId: String(i), principal: 'a' }])?.jobId).toBe(String(i));
    expect(
      turns.next([
        { jobId: '6', principal: 'a' },
        { jobId: '100', principal: 'b' },
      ])?.principal,
    ).toBe('b');
    expect(
      turns.next([
        { jobId: '6', principal: 'a' },
        { jobId: '101', principal: 'b' },
      ])?.principal,
    ).toBe('a');
  });

  it('orders job ids as numbers, not text', () => {
    expect(
      new FairTurns().next([
        { jobId: '10', principal: 'a' },
        { jobId: '9', principal: 'b' },
      ])?.jobId,
    ).toBe('9');
  });

  it('has nothing to run for an empty queue', () => {
    expect(new FairTurns().next([])).toBeUndefined();
  });
});
