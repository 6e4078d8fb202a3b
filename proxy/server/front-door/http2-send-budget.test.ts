import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../policy/clock.ts';
import { ManualTimers } from '../../../policy/timers.ts';
import { SEND_BUDGET, SendBudget, type StallLimits, StallWatch } from './http2-send-budget.ts';

const LIMITS = { bytes: 1000, answerBytes: 100 };

/** A budget over what the test sets by hand: answers in progress and their queued bytes. */
function budgeted() {
  const state = { answers: 0, queued: 0 };
  const budget = new SendBudget(LIMITS, () => ({ ...state }));
  const resumed: string[] = [];
  const waiter = (name: string) => () => resumed.push(name);
  /** A handler that begins its answer when resumed, as the front door's does. */
  const starter = (name: string) => () => {
    resumed.push(name);
    state.answers++;
  };
  return { state, budget, resumed, waiter, starter };
}

describe('SendBudget: room for a chunk', () => {
  it('has room below the budget of queued bytes, none at it, whatever the answers in progress', () => {
    const { state, budget } = budgeted();
    state.answers = 100;
    state.queued = LIMITS.bytes - 1;
    expect(budget.hasRoom()).toBe(true);
    state.queued = LIMITS.bytes;
    expect(budget.hasRoom()).toBe(false);
  });

  it('has no room while a chunk waits, whatever is held: first come, first served', () => {
    const { state, budget, waiter } = budgeted();
    state.queued = LIMITS.bytes;
    budget.wait(waiter('a'));
    state.queued = 0;
    expect(budget.hasRoom()).toBe(false);
    expect(budget.waiting).toBe(1);
    expect(budget.waited).toBe(1);
  });
});

describe('SendBudget: room for a new answer', () => {
  it('a handler starts while the answers in progress, at their share each, and their queued bytes stay below the budget', () => {
    const { state, budget } = budgeted();
    state.answers = 9;
    expect(budget.mayStart()).toBe(true);
    state.answers = 10;
    expect(budget.mayStart(), 'ten shares fill the budget').toBe(false);
    state.answers = 5;
    state.queued = 499;
    expect(budget.mayStart()).toBe(true);
    state.queued = 500;
    expect(budget.mayStart()).toBe(false);
    state.queued = 0;
    budget.reserve(500);
    expect(budget.mayStart(), 'a reserved chunk counts').toBe(false);
  });

  it('the shipped budget lets 32 answers of a zero-window client in progress, then the next waits', () => {
    expect(SEND_BUDGET.bytes / SEND_BUDGET.answerBytes).toBe(32);
  });

  it('no handler starts while one waits, however much room there is', () => {
    const { state, budget, starter } = budgeted();
    state.answers = 10;
    budget.waitToStart(starter('a'));
    state.answers = 0;
    expect(budget.mayStart()).toBe(false);
    expect(budget.waiting).toBe(1);
    expect(budget.waited).toBe(1);
  });

  it('waiting handlers start in arrival order as answers end, as many as there is room for', () => {
    const { state, budget, resumed, starter } = budgeted();
    state.answers = 10;
    for (const name of ['a', 'b', 'c', 'd']) budget.waitToStart(starter(name));
    budget.sent();
    expect(resumed, 'still full').toEqual([]);
    state.answers = 8;
    budget.sent();
    expect(resumed).toEqual(['a', 'b']);
    expect(state.answers).toBe(10);
    state.answers = 0;
    budget.sent();
    expect(resumed).toEqual(['a', 'b', 'c', 'd']);
    expect(budget.mayStart()).toBe(true);
  });

  it('answers in progress never keep a chunk waiting: a waiting handler does not hold a chunk back', () => {
    const { state, budget, resumed, waiter, starter } = budgeted();
    state.answers = 10;
    state.queued = LIMITS.bytes;
    budget.waitToStart(starter('handler'));
    budget.wait(waiter('chunk'));
    // Bytes went out: the chunk goes on though the answers' shares still fill the budget.
    state.queued = 0;
    budget.sent();
    expect(resumed).toEqual(['chunk']);
    expect(budget.hasRoom()).toBe(true);
    expect(budget.waiting).toBe(1);
  });
});

describe('SendBudget: waiting chunks resume as bytes go out', () => {
  it("resumes chunks in arrival order, each counted as one answer's share until it is reserved", () => {
    const { state, budget, resumed, waiter } = budgeted();
    state.queued = LIMITS.bytes;
    for (const name of ['a', 'b', 'c', 'd']) budget.wait(waiter(name));
    budget.sent();
    expect(resumed, 'still at the budget').toEqual([]);
    // Room for two shares: two resume, the third would reach the budget.
    state.queued = LIMITS.bytes - 2 * LIMITS.answerBytes;
    budget.sent();
    expect(resumed).toEqual(['a', 'b']);
    expect(budget.waiting).toBe(2);
    state.queued = 0;
    budget.sent();
    expect(resumed).toEqual(['a', 'b', 'c', 'd']);
    expect(budget.hasRoom()).toBe(true);
  });

  it('a chunk reserved before it is read counts as held until unreserved', () => {
    const { state, budget, resumed, waiter } = budgeted();
    state.queued = LIMITS.bytes - 300;
    budget.reserve(300);
    expect(budget.hasRoom()).toBe(false);
    budget.wait(waiter('a'));
    // Written: its bytes are now measured as queued; the reservation goes.
    state.queued = LIMITS.bytes;
    budget.unreserve(300);
    budget.sent();
    expect(resumed).toEqual([]);
    state.queued = LIMITS.bytes - 300;
    budget.sent();
    expect(resumed).toEqual(['a']);
  });

  it('a cancelled waiter is never resumed', () => {
    const { state, budget, resumed, waiter, starter } = budgeted();
    state.queued = LIMITS.bytes;
    const a = waiter('a');
    const h = starter('h');
    budget.wait(a);
    budget.wait(waiter('b'));
    budget.waitToStart(h);
    budget.waitToStart(starter('i'));
    budget.cancel(a);
    budget.cancel(h);
    state.queued = 0;
    budget.sent();
    expect(resumed).toEqual(['b', 'i']);
  });

  it('room() resolves on resume and rejects when its signal aborts first', async () => {
    const { state, budget } = budgeted();
    state.queued = LIMITS.bytes;
    const aborter = new AbortController();
    const aborted = budget.room(aborter.signal);
    const kept = budget.room(new AbortController().signal);
    aborter.abort(new Error('client gone'));
    await expect(aborted).rejects.toThrow('client gone');
    expect(budget.waiting).toBe(1);
    state.queued = 0;
    budget.sent();
    await expect(kept).resolves.toBeUndefined();
    expect(() => budget.room(aborter.signal)).toThrow('client gone');
  });
});

describe('SendBudget: end', () => {
  it('end() drops the waiters: none resumes, none is taken', () => {
    const { state, budget, resumed, waiter, starter } = budgeted();
    state.queued = LIMITS.bytes;
    budget.wait(waiter('a'));
    budget.waitToStart(starter('h'));
    budget.end();
    state.queued = 0;
    budget.sent();
    budget.wait(waiter('b'));
    budget.waitToStart(starter('i'));
    budget.sent();
    expect(resumed).toEqual([]);
    expect(budget.waiting).toBe(0);
  });
});

const PERIOD_MS = 60_000;

interface Answer {
  sent: number;
  unsent: number;
  /** Request body bytes received. */
  read?: number;
  /** Its request body is still due. */
  bodyDue?: boolean;
}

/** A watch over answers whose progress the test sets by hand; `cuts` lists the send stalls, `bodyCuts` the body's. */
function watched(limits: StallLimits = { sendMs: PERIOD_MS, bodyMs: PERIOD_MS }) {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const answers = new Map<string, Answer>();
  const cuts: string[][] = [];
  const bodyCuts: string[][] = [];
  const watch = new StallWatch<string>(
    limits,
    timers,
    {
      answers: () => answers.keys(),
      progressOf: (a) => answers.get(a)!.sent + (answers.get(a)!.read ?? 0),
      unsentOf: (a) => answers.get(a)!.unsent,
      bodyDue: (a) => answers.get(a)!.bodyDue ?? false,
    },
    (stalled, phase) => {
      (phase === 'body' ? bodyCuts : cuts).push(stalled);
      for (const a of stalled) answers.delete(a);
    },
  );
  return { timers, answers, cuts, bodyCuts, watch };
}

describe('StallWatch: an answer that sends nothing for the send timeout is stalled', () => {
  it('an answer with unsent bytes and no progress is stalled at the second check, one to two periods after it stalled', async () => {
    const { timers, answers, cuts, watch } = watched();
    answers.set('a', { sent: 0, unsent: 500 });
    watch.answering();
    await timers.advance(PERIOD_MS);
    expect(cuts, 'first seen with unsent bytes').toEqual([]);
    await timers.advance(PERIOD_MS - 1);
    expect(cuts).toEqual([]);
    await timers.advance(1);
    expect(cuts).toEqual([['a']]);
  });

  it('an answer whose bytes go out, however slowly, is never stalled; one that stops is', async () => {
    const { timers, answers, cuts, watch } = watched();
    answers.set('slow', { sent: 0, unsent: 10_000 });
    answers.set('stopped', { sent: 100, unsent: 10_000 });
    watch.answering();
    for (let i = 1; i <= 10; i++) {
      answers.get('slow')!.sent = i;
      await timers.advance(PERIOD_MS);
    }
    expect(cuts).toEqual([['stopped']]);
    expect(answers.has('slow')).toBe(true);
  });

  it('more bytes written while none went out is no progress', async () => {
    const { timers, answers, cuts, watch } = watched();
    answers.set('a', { sent: 0, unsent: 100 });
    watch.answering();
    await timers.advance(PERIOD_MS);
    answers.get('a')!.unsent = 900;
    await timers.advance(PERIOD_MS);
    expect(cuts).toEqual([['a']]);
  });

  it('an answer with nothing unsent (all out, or still being prepared) is never stalled', async () => {
    const { timers, answers, cuts, watch } = watched();
    answers.set('a', { sent: 0, unsent: 0 });
    watch.answering();
    await timers.advance(10 * PERIOD_MS);
    expect(cuts).toEqual([]);
    // Its first bytes then stall: counted from the check that first saw them.
    answers.get('a')!.unsent = 100;
    await timers.advance(PERIOD_MS);
    expect(cuts).toEqual([]);
    await timers.advance(PERIOD_MS);
    expect(cuts).toEqual([['a']]);
  });

  it('the checks stop when the session has no answer left and start again with the next; end() stops them', async () => {
    const { timers, answers, cuts, watch } = watched();
    answers.set('a', { sent: 0, unsent: 100 });
    watch.answering();
    await timers.advance(PERIOD_MS / 2);
    answers.delete('a');
    await timers.advance(PERIOD_MS);
    answers.set('b', { sent: 0, unsent: 100 });
    await timers.advance(10 * PERIOD_MS);
    expect(cuts, 'no check runs without answering()').toEqual([]);
    watch.answering();
    await timers.advance(2 * PERIOD_MS);
    expect(cuts).toEqual([['b']]);
    answers.set('c', { sent: 0, unsent: 100 });
    watch.answering();
    watch.end();
    await timers.advance(10 * PERIOD_MS);
    expect(cuts).toEqual([['b']]);
  });
});

describe('StallWatch: an answer whose request body is still due is judged by the body timeout', () => {
  it('a queued answer (an early answer, a 408) whose body receives nothing is a body stall, one to two periods after it stalled', async () => {
    const { timers, answers, cuts, bodyCuts, watch } = watched();
    answers.set('a', { sent: 0, unsent: 300, bodyDue: true });
    watch.answering();
    await timers.advance(2 * PERIOD_MS - 1);
    expect(bodyCuts).toEqual([]);
    await timers.advance(1);
    expect(bodyCuts).toEqual([['a']]);
    expect(cuts).toEqual([]);
  });

  it('body bytes received are progress, as answer bytes sent are; when both stop it is stalled', async () => {
    const { timers, answers, bodyCuts, watch } = watched();
    answers.set('uploading', { sent: 0, unsent: 300, read: 0, bodyDue: true });
    answers.set('taking', { sent: 0, unsent: 300, read: 0, bodyDue: true });
    watch.answering();
    for (let i = 1; i <= 10; i++) {
      answers.get('uploading')!.read = i;
      answers.get('taking')!.sent = i;
      await timers.advance(PERIOD_MS);
    }
    expect(bodyCuts).toEqual([]);
    await timers.advance(2 * PERIOD_MS);
    expect(bodyCuts).toEqual([['uploading', 'taking']]);
  });

  it('each stall waits for its own timeout: checks every shorter one, a body stall at the body timeout, a send stall at the send timeout', async () => {
    const bodyMs = PERIOD_MS;
    const sendMs = 3 * PERIOD_MS;
    const { timers, answers, cuts, bodyCuts, watch } = watched({ sendMs, bodyMs });
    answers.set('body', { sent: 0, unsent: 100, bodyDue: true });
    answers.set('send', { sent: 0, unsent: 100 });
    watch.answering();
    // First seen at the first check (one period); stalled once its timeout passed since.
    await timers.advance(PERIOD_MS + bodyMs);
    expect(bodyCuts).toEqual([['body']]);
    expect(cuts).toEqual([]);
    await timers.advance(sendMs - bodyMs - 1);
    expect(cuts).toEqual([]);
    await timers.advance(1);
    expect(cuts).toEqual([['send']]);
  });

  it('a longer body timeout leaves a body stall alone until it passed', async () => {
    const { timers, answers, cuts, bodyCuts, watch } = watched({ sendMs: PERIOD_MS, bodyMs: 4 * PERIOD_MS });
    answers.set('a', { sent: 0, unsent: 100, bodyDue: true });
    watch.answering();
    await timers.advance(5 * PERIOD_MS - 1);
    expect(bodyCuts).toEqual([]);
    await timers.advance(1);
    expect(bodyCuts).toEqual([['a']]);
    expect(cuts).toEqual([]);
  });

  it('an answer whose body ends while it stalls is judged by the send timeout from then on, its stall counted from when it stopped', async () => {
    const { timers, answers, cuts, bodyCuts, watch } = watched({ sendMs: PERIOD_MS, bodyMs: 4 * PERIOD_MS });
    answers.set('a', { sent: 0, unsent: 100, bodyDue: true });
    watch.answering();
    await timers.advance(2 * PERIOD_MS);
    answers.get('a')!.bodyDue = false;
    await timers.advance(PERIOD_MS);
    expect(cuts).toEqual([['a']]);
    expect(bodyCuts).toEqual([]);
  });
});
