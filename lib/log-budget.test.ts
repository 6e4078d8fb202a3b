import { describe, expect, it } from 'vitest';
import { LogBudget } from './log-budget.ts';

describe('LogBudget', () => {
  it('writes the first lines of a kind per interval, counts the rest and reports them on the next written line', () => {
    const budget = new LogBudget({ linesPerInterval: 2, intervalMs: 1000 });
    const turns = Array.from({ length: 5 }, () => budget.take('dup', 0));
    expect(turns.map((t) => t.write)).toEqual([true, true, false, false, false]);
    expect(budget.take('dup', 999).write).toBe(false);
    expect(budget.take('dup', 1000)).toEqual({ write: true, suppressed: 4 });
    expect(budget.take('dup', 1001)).toEqual({ write: true, suppressed: 0 });
    expect(budget.take('dup', 1002).write).toBe(false);
  });

  it('keeps one budget per kind', () => {
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000 });
    expect(budget.take('a', 0).write).toBe(true);
    expect(budget.take('a', 1).write).toBe(false);
    expect(budget.take('b', 2).write).toBe(true);
  });

  it('bounds the lines of any number of events to lines × intervals elapsed', () => {
    const budget = new LogBudget({ linesPerInterval: 3, intervalMs: 100 });
    let written = 0;
    let reported = 0;
    for (let i = 0; i < 10_000; i++) {
      const turn = budget.take('flood', i / 10); // 10,000 events over 1,000 ms: ten intervals
      if (turn.write) written++;
      reported += turn.suppressed;
    }
    expect(written).toBe(30);
    // Every event is either written or reported by a later line, but the last interval's leftovers.
    expect(written + reported).toBeGreaterThan(10_000 - 1000);
  });

  it('bounds the number of kinds it tracks', () => {
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000, maxKinds: 2 });
    expect(budget.take('a', 0).write).toBe(true);
    expect(budget.take('b', 0).write).toBe(true);
    expect(budget.take('c', 0).write).toBe(true);
    expect(budget.take('d', 0).write).toBe(false);
  });

  it('keeps the budgets of the kinds it tracks once the table is full', () => {
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000, maxKinds: 2 });
    budget.take('a', 0);
    budget.take('b', 0);
    expect(budget.take('c', 0).write).toBe(true);
    // a and b still have their own windows, not the shared one c used up.
    expect(budget.take('a', 1000).write).toBe(true);
    expect(budget.take('b', 1000).write).toBe(true);
    expect(budget.take('a', 1001).write).toBe(false);
  });

  it('gives the place of a kind whose interval ended to a new kind once the table is full', () => {
    // Kinds an attacker chooses (client addresses) must not hold the table for good, leaving every
    // later kind one shared budget.
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000, maxKinds: 2 });
    budget.take('a', 0);
    budget.take('b', 500);
    // a's interval has ended, b's not: c takes a's place, d shares the slot past the table.
    expect(budget.take('c', 1000).write).toBe(true);
    expect(budget.take('d', 1000).write).toBe(true);
    expect(budget.take('e', 1000).write).toBe(false);
    expect(budget.take('b', 1001).write).toBe(false);
    expect(budget.take('c', 1001).write).toBe(false);
    // Later still, every kind has a window of its own again.
    for (const kind of ['f', 'g']) expect(budget.take(kind, 2600).write, kind).toBe(true);
    expect(budget.take('f', 2601).write).toBe(false);
    expect(budget.take('g', 2601).write).toBe(false);
  });

  it.each([
    ['whose interval ends exactly now', 0, 1000],
    // A clock stepped back before the windows started: they are dropped at once.
    ['whose windows start after a clock that went back', 5000, 4000],
  ])('frees the places of kinds %s', (_, startMs, laterMs) => {
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000, maxKinds: 2 });
    budget.take('a', startMs);
    budget.take('b', startMs);
    // The table is full: d and e share the slot past it, e's line left out there.
    expect(budget.take('d', startMs).write).toBe(true);
    expect(budget.take('e', startMs).write).toBe(false);
    // Every window is over: c gets one of its own, which owes no one's count. In the shared slot it
    // would report e's left-out line.
    expect(budget.take('c', laterMs)).toEqual({ write: true, suppressed: 0 });
  });

  it('starts a new interval when the clock goes back', () => {
    const budget = new LogBudget({ linesPerInterval: 1, intervalMs: 1000 });
    expect(budget.take('a', 5000).write).toBe(true);
    expect(budget.take('a', 5001).write).toBe(false);
    expect(budget.take('a', 4000)).toEqual({ write: true, suppressed: 1 });
  });

  it.each([
    [0, 1000],
    [0.5, 1000],
    [Number.NaN, 1000],
    [1, 0],
    [1, -1],
    [1, Number.NaN],
  ])('refuses %d lines per %d ms', (linesPerInterval, intervalMs) => {
    expect(() => new LogBudget({ linesPerInterval, intervalMs })).toThrow(
      'LogBudget needs linesPerInterval >= 1 and intervalMs > 0',
    );
  });
});
