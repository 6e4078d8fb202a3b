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

  it('refuses a budget of no lines', () => {
    expect(() => new LogBudget({ linesPerInterval: 0, intervalMs: 1000 })).toThrow(RangeError);
  });
});
