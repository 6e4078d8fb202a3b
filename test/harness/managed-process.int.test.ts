/**
 * The harness's long-running process: what a test reads after `exited` is everything the process
 * wrote, and a grandchild that keeps the output pipes open does not hold `exited` back.
 */
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

  it('resolves exited within about a second when a grandchild still holds its output open', async () => {
    const started = performance.now();
    const child = startProcess('sh', ['-c', 'sleep 5 & printf done']);
    expect(await child.exited).toBe(0);
    expect(child.stdout()).toBe('done');
    expect(performance.now() - started).toBeLessThan(4000);
  });
});
