/**
 * The usage recorder's flushes against a database that hangs, refuses or loses a COMMIT's answer
 * (a stand-in pool; the real one is in usage-flush.int.test.ts), on a clock moved by hand: one flush
 * at a time within its timeout, what comes meanwhile held within its bound, what does not fit
 * counted and reported once an interval, and a retry that never counts a batch twice.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { ManualTimers } from '../../policy/timers.ts';
import { FakeUsageDb } from '../../test/support/fake-usage-db.ts';
import { observeDownload } from '../../test/support/usage-observations.ts';
import { STOP_BOUND_MS, startUsageRecorder } from './usage-recorder.ts';

const FLUSH_MS = 1000;
const TIMEOUT_MS = 5000;
const MAX_ROWS = 10;

function setup() {
  const clock = new ManualClock(Date.UTC(2026, 11, 5, 12));
  const timers = new ManualTimers(clock);
  const db = new FakeUsageDb();
  const lines: Array<{ level: number; msg: string } & Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  const recorder = startUsageRecorder({
    pool: db,
    log,
    clock,
    timers,
    flushMs: FLUSH_MS,
    maxRows: MAX_ROWS,
    flushTimeoutMs: TIMEOUT_MS,
  });
  let n = 0;
  /** A principal never seen before downloads an artifact never seen before: two new rows. */
  const download = () => observeDownload(recorder, ++n);
  const logged = (msg: RegExp) => lines.filter((l) => msg.test(l.msg));
  return { clock, timers, db, recorder, download, logged, observed: () => n };
}

describe('usage flushes against a database that does not answer', () => {
  it('a hanging flush is the only one: counts meanwhile are held within the bound, the rest counted as dropped and reported once an interval, and all held reach the database once it answers', async () => {
    const { timers, db, recorder, download, logged, observed } = setup();
    db.mode = 'hang';
    for (let i = 0; i < 5000; i++) download();
    await timers.advance(0);
    // The early flush at MAX_ROWS rows hangs; the requests after it start no other.
    expect(db.connects).toBe(1);
    expect(db.checkedOut).toBe(1);
    expect(recorder.status.pendingRows).toBe(2 * MAX_ROWS);
    const dropped = recorder.status.dropped;
    expect(dropped.downloads + dropped.requests).toBe(2 * observed() - 2 * MAX_ROWS);

    // The interval's tick joins the hung flush and reports the dropped in one line; no tick more
    // comes while it hangs, however many requests.
    await timers.advance(FLUSH_MS);
    for (let i = 0; i < 400; i++) download();
    await timers.advance(TIMEOUT_MS - FLUSH_MS - 1);
    expect(db.connects).toBe(1);
    expect(logged(/counts dropped/)).toHaveLength(1);
    expect(logged(/counts dropped/)[0]).toMatchObject({ downloads: 4990, requests: 4990 });

    // At its timeout the hung flush's connection is ended and its batch kept.
    await timers.advance(1);
    expect([db.checkedOut, db.ended]).toEqual([0, 1]);
    expect(recorder.status.flushFailures).toEqual({ failed: 0, timeout: 1 });
    expect(logged(/flush timed out/).length).toBe(1);
    expect(recorder.status.pendingRows).toBe(2 * MAX_ROWS);

    // The database answers again: the next interval's flush adds everything held, once.
    db.mode = 'ok';
    await timers.advance(FLUSH_MS);
    expect(db.connects).toBe(2);
    expect(recorder.status.pendingRows).toBe(0);
    expect(logged(/counts dropped/)).toHaveLength(2);
    expect(logged(/counts dropped/)[1]).toMatchObject({ downloads: 400, requests: 400 });
    const total = recorder.status.dropped;
    expect(db.committed.downloads + total.downloads).toBe(observed());
    expect(db.committed.requests + total.requests).toBe(observed());
    expect(db.committed.downloads).toBe(MAX_ROWS);
    await recorder.stop();
  });

  it('a refusing database is tried once an interval, not once a request, with one line each', async () => {
    const { timers, db, recorder, download, logged } = setup();
    db.mode = 'refuse';
    for (let i = 0; i < 1000; i++) download();
    await timers.advance(0);
    expect(db.connects).toBe(1);
    for (let i = 0; i < 1000; i++) download();
    await timers.advance(3 * FLUSH_MS);
    expect(db.connects).toBe(4);
    expect(logged(/flush failed/).length).toBe(4);
    expect(logged(/counts dropped/).length).toBeLessThanOrEqual(3);
    db.mode = 'ok';
    await timers.advance(FLUSH_MS);
    expect(db.committed.requests + recorder.status.dropped.requests).toBe(2000);
    await recorder.stop();
  });
});

describe('a flush whose COMMIT went unanswered', () => {
  async function commitLost(outcome: 'committed' | 'aborted') {
    const { timers, db, recorder, download } = setup();
    db.mode = 'hangCommit';
    for (let i = 0; i < 3; i++) download();
    await timers.advance(FLUSH_MS + TIMEOUT_MS);
    expect(recorder.status.flushFailures.timeout).toBe(1);
    expect(recorder.status.pendingRows).toBe(6);
    // The server went on after its client left: the COMMIT took effect, or it rolled back.
    if (outcome === 'committed') db.commitHung();
    db.xactStatus = outcome;
    db.mode = 'ok';
    download();
    await timers.advance(FLUSH_MS);
    expect(db.statements.filter((s) => s === 'SELECT').length).toBeGreaterThan(0);
    expect(recorder.status.pendingRows).toBe(0);
    return { db, recorder };
  }

  it('is not sent again when the database says it committed', async () => {
    const { db, recorder } = await commitLost('committed');
    expect(db.committed).toMatchObject({ downloads: 4, requests: 4 });
    expect(db.committed.inserts.length).toBe(2);
    await recorder.stop();
  });

  it('is sent again when the database says it rolled back', async () => {
    const { db, recorder } = await commitLost('aborted');
    expect(db.committed).toMatchObject({ downloads: 4, requests: 4 });
    expect(db.committed.inserts.length).toBe(1);
    await recorder.stop();
  });

  // Only an ERROR answer says the COMMIT rolled back. A PANIC (or FATAL) ends the session or the
  // server, perhaps after the commit record reached the WAL, which recovery replays. Taken as a
  // rollback, the batch was sent again: counted twice.
  it('is not sent again when the COMMIT answered PANIC after its record was written', async () => {
    const { timers, db, recorder, download } = setup();
    db.mode = 'panicAfterCommit';
    for (let i = 0; i < 3; i++) download();
    await timers.advance(FLUSH_MS);
    expect(recorder.status.flushFailures.failed).toBe(1);
    expect(db.committed).toMatchObject({ downloads: 3, requests: 3 });
    db.mode = 'ok';
    db.xactStatus = 'committed';
    download();
    await timers.advance(FLUSH_MS);
    expect(db.committed).toMatchObject({ downloads: 4, requests: 4 });
    expect(recorder.status.pendingRows).toBe(0);
    await recorder.stop();
  });

  it('is held while its transaction is still in progress, and what comes meanwhile is sent', async () => {
    const { timers, db, recorder, download } = setup();
    db.mode = 'hangCommit';
    download();
    await timers.advance(FLUSH_MS + TIMEOUT_MS);
    db.mode = 'ok';
    db.xactStatus = 'in progress';
    download();
    await timers.advance(3 * FLUSH_MS);
    expect(db.committed).toMatchObject({ downloads: 1, requests: 1 });
    expect(recorder.status.pendingRows).toBe(2);
    db.commitHung();
    db.xactStatus = 'committed';
    await timers.advance(FLUSH_MS);
    expect(db.committed).toMatchObject({ downloads: 2, requests: 2 });
    expect(recorder.status.pendingRows).toBe(0);
    await recorder.stop();
  });
});

describe('stop', () => {
  it('gives up on a hung flush within STOP_BOUND_MS, ends its connection and says once what was not flushed', async () => {
    const { timers, db, recorder, download, logged } = setup();
    db.mode = 'hang';
    for (let i = 0; i < 3; i++) download();
    await timers.advance(FLUSH_MS);
    expect(db.checkedOut).toBe(1);
    let stopped = false;
    void recorder.stop().then(() => (stopped = true));
    await timers.advance(STOP_BOUND_MS - 1);
    expect(stopped).toBe(false);
    await timers.advance(1);
    expect(stopped).toBe(true);
    expect([db.checkedOut, db.ended]).toEqual([0, 1]);
    const lost = logged(/did not finish before the stop/);
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({ downloads: 3, requests: 3 });
  });

  it('flushes what is pending when the database answers', async () => {
    const { db, recorder, download } = setup();
    for (let i = 0; i < 3; i++) download();
    await recorder.stop();
    expect(db.committed).toMatchObject({ downloads: 3, requests: 3 });
  });
});
