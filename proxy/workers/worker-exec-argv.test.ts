import { describe, expect, it } from 'vitest';
import { SINGLE_THREADED_GC, workerExecArgv } from './worker-exec-argv.ts';

describe('workerExecArgv', () => {
  it('adds the single-threaded collector when the workers take every core', () => {
    expect(workerExecArgv(['--max-semi-space-size=4'], 2, 2)).toEqual(['--max-semi-space-size=4', SINGLE_THREADED_GC]);
    expect(workerExecArgv([], 4, 2)).toEqual([SINGLE_THREADED_GC]);
  });

  it('keeps the parallel collector while a core is left to its helper threads', () => {
    expect(workerExecArgv(['--max-semi-space-size=4'], 2, 3)).toEqual(['--max-semi-space-size=4']);
    expect(workerExecArgv([], 1, 8)).toEqual([]);
  });

  it("leaves the operator's own choice of the collector's threads alone", () => {
    for (const option of [
      '--single-threaded-gc',
      '--no-single-threaded-gc',
      '--single-threaded',
      '--parallel-scavenge',
      '--no-concurrent-marking',
    ])
      expect(workerExecArgv([option], 2, 2)).toEqual([option]);
    // A look-alike option is not one of them.
    expect(workerExecArgv(['--concurrent-marking-max-worker-num=1'], 2, 2)).toEqual([
      '--concurrent-marking-max-worker-num=1',
      SINGLE_THREADED_GC,
    ]);
  });

  it("does not change the coordinating process's own list", () => {
    const parent = ['--enable-source-maps'];
    workerExecArgv(parent, 2, 2);
    expect(parent).toEqual(['--enable-source-maps']);
  });
});
