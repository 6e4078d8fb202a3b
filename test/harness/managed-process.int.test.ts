/**
 * The harness's long-running process: what a test reads after `exited` is everything the process
 * wrote, and a grandchild that keeps the output pipes open does not hold `exited` back.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { startProcess } from './managed-process.ts';

describe('startProcess', () => {
  it('has read all of its output when exited resolves (300 short-lived processes, 4 at a time)', async () => {
    // One after another in each lane: the exit is then often seen before the output (concurrent
    // starts keep the event loop busy long enough for the pipe to be read first).
    const outputs: string[] = [];
    await Promise.all(
      Array.from({ length: 4 }, async (_, lane) => {
        for (let i = 0; i < 75; i++) {
          const child = startProcess('printf', [`${lane}.${i}`]);
          await child.exited;
          outputs.push(child.stdout());
        }
      }),
    );
    expect(outputs.filter((o) => !/^\d\.\d+$/.test(o))).toEqual([]);
    expect(outputs).toHaveLength(300);
  });

  it('gives every JSON line as it is ended, read in pieces, asked while it writes', async () => {
    // A line in two writes, then two lines and the start of a third in one, then its end.
    const script = [
      'printf \'{"n":1,"msg":"a\'; sleep 0.3',
      "printf ' b\"}\\n'; sleep 0.3",
      'printf \'not json\\n{"n":2}\\n{"n":3,\'; sleep 0.3',
      'printf \'"msg":"c"}\\n{"n":4\'',
    ].join('; ');
    const child = startProcess('sh', ['-c', script]);
    const seen: number[][] = [];
    while (child.isRunning()) {
      seen.push(child.logLines().map((l) => l.n as number));
      await sleep(20);
    }
    await child.exited;
    expect(child.logLines()).toEqual([{ n: 1, msg: 'a b' }, { n: 2 }, { n: 3, msg: 'c' }]);
    // Never a line twice, never one taken back, and the halves of a line never read as lines.
    for (const n of seen) expect([1, 2, 3].slice(0, n.length)).toEqual(n);
    expect(seen.some((n) => n.length === 1)).toBe(true);
  });

  it('resolves exited within about a second when a grandchild still holds its output open', async () => {
    const started = performance.now();
    const child = startProcess('sh', ['-c', 'sleep 5 & printf done']);
    expect(await child.exited).toBe(0);
    expect(child.stdout()).toBe('done');
    expect(performance.now() - started).toBeLessThan(4000);
  });
});
