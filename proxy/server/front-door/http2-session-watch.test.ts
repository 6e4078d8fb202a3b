import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../policy/clock.ts';
import { ManualTimers } from '../../../policy/timers.ts';
import {
  CONTROL_FRAME_BUDGET,
  type FloodKind,
  RESET_BUDGET,
  SessionWatch,
  WindowCounter,
} from './http2-session-watch.ts';

const LIMITS = { headersTimeoutMs: 30_000, keepAliveTimeoutMs: 5_000 };

function watched() {
  const clock = new ManualClock();
  const timers = new ManualTimers(clock);
  const verdicts = { idle: 0, floods: [] as FloodKind[] };
  const watch = new SessionWatch(
    LIMITS,
    { clock, timers },
    { idle: () => verdicts.idle++, flood: (kind) => verdicts.floods.push(kind) },
  );
  return { clock, timers, verdicts, watch };
}

describe('SessionWatch: idle sessions', () => {
  it('a session without a first stream is idle exactly at the head timeout', async () => {
    const { timers, verdicts } = watched();
    await timers.advance(LIMITS.headersTimeoutMs - 1);
    expect(verdicts.idle).toBe(0);
    await timers.advance(1);
    expect(verdicts.idle).toBe(1);
  });

  it('an open stream holds the session however long it takes; the keep-alive timeout starts when the last closes', async () => {
    const { timers, verdicts, watch } = watched();
    await timers.advance(1_000);
    watch.streamOpened();
    watch.streamOpened();
    await timers.advance(10 * LIMITS.headersTimeoutMs);
    expect(verdicts.idle).toBe(0);
    watch.streamClosed(false);
    await timers.advance(10 * LIMITS.keepAliveTimeoutMs);
    expect(verdicts.idle, 'one stream still open').toBe(0);
    watch.streamClosed(false);
    expect(watch.openStreams).toBe(0);
    await timers.advance(LIMITS.keepAliveTimeoutMs - 1);
    expect(verdicts.idle).toBe(0);
    await timers.advance(1);
    expect(verdicts.idle).toBe(1);
  });

  it('a new stream before the keep-alive timeout cancels it; only one timer is ever pending', async () => {
    const { timers, verdicts, watch } = watched();
    watch.streamOpened();
    expect(timers.size).toBe(0);
    watch.streamClosed(false);
    expect(timers.size).toBe(1);
    await timers.advance(LIMITS.keepAliveTimeoutMs - 1);
    watch.streamOpened();
    watch.streamClosed(false);
    expect(timers.size).toBe(1);
    await timers.advance(LIMITS.keepAliveTimeoutMs - 1);
    expect(verdicts.idle).toBe(0);
    await timers.advance(1);
    expect(verdicts.idle).toBe(1);
  });

  it('control frames do not keep an idle session open', async () => {
    const { timers, verdicts, watch } = watched();
    for (let ms = 0; ms < LIMITS.headersTimeoutMs; ms += 1_000) {
      watch.controlFrame('ping');
      await timers.advance(1_000);
    }
    expect(verdicts.idle).toBe(1);
  });

  it('an ended session decides nothing more and leaves no timer', async () => {
    const { timers, verdicts, watch } = watched();
    watch.end();
    expect(timers.size).toBe(0);
    await timers.advance(LIMITS.headersTimeoutMs * 2);
    watch.streamOpened();
    watch.streamClosed(false);
    await timers.advance(LIMITS.keepAliveTimeoutMs * 2);
    for (let i = 0; i <= CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame('ping');
    expect(verdicts).toEqual({ idle: 0, floods: [] });
  });
});

describe('SessionWatch: floods', () => {
  it('PING frames: the budget per window passes, one more is a flood', () => {
    const { watch, verdicts } = watched();
    for (let i = 0; i < CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame('ping');
    expect(verdicts.floods).toEqual([]);
    watch.controlFrame('ping');
    expect(verdicts.floods).toEqual(['ping']);
  });

  it('PING and SETTINGS share one budget; the flood names the frame that broke it, once', () => {
    const { watch, verdicts } = watched();
    for (let i = 0; i < CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame(i % 2 === 0 ? 'ping' : 'settings');
    watch.controlFrame('settings');
    watch.controlFrame('ping');
    expect(verdicts.floods).toEqual(['settings']);
  });

  it('the same frames spread over two windows are no flood', async () => {
    const { watch, verdicts, timers } = watched();
    for (let i = 0; i < CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame('ping');
    await timers.advance(CONTROL_FRAME_BUDGET.windowMs);
    for (let i = 0; i < CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame('ping');
    expect(verdicts.floods).toEqual([]);
  });

  it('one millisecond short of the window, the count goes on', async () => {
    const { watch, verdicts, timers } = watched();
    for (let i = 0; i < CONTROL_FRAME_BUDGET.frames; i++) watch.controlFrame('ping');
    await timers.advance(CONTROL_FRAME_BUDGET.windowMs - 1);
    watch.controlFrame('ping');
    expect(verdicts.floods).toEqual(['ping']);
  });

  it('rapid reset: streams the client resets count, streams that end normally do not', () => {
    const { watch, verdicts } = watched();
    for (let i = 0; i < 10 * RESET_BUDGET.resets; i++) {
      watch.streamOpened();
      watch.streamClosed(false);
    }
    expect(verdicts.floods).toEqual([]);
    for (let i = 0; i < RESET_BUDGET.resets; i++) {
      watch.streamOpened();
      watch.streamClosed(true);
    }
    expect(verdicts.floods).toEqual([]);
    watch.streamOpened();
    watch.streamClosed(true);
    expect(verdicts.floods).toEqual(['reset']);
  });

  it('streams refused before they were requests count with the resets, in the same window', () => {
    const { watch, verdicts } = watched();
    watch.streamsRefused(RESET_BUDGET.resets - 1);
    watch.streamOpened();
    watch.streamClosed(true);
    expect(verdicts.floods).toEqual([]);
    watch.streamsRefused(1);
    expect(verdicts.floods).toEqual(['reset']);
  });
});

describe('WindowCounter', () => {
  it('counts from the first hit, whatever the clock reads then', () => {
    const counter = new WindowCounter(2, 100);
    expect([counter.hit(-5_000), counter.hit(-4_950), counter.hit(-4_901)]).toEqual([false, false, true]);
    expect(counter.hit(-4_900)).toBe(false);
  });
});
