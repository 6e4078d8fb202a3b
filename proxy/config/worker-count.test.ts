import { describe, expect, it } from 'vitest';
import { runsOnWorkers, workerCount } from './worker-count.ts';

describe('workerCount', () => {
  it('auto: one worker per core for a writer or reader with a database of its own, and for a router', () => {
    expect(workerCount('auto', 'api', true, 8)).toBe(8);
    expect(workerCount('auto', 'reader', true, 3)).toBe(3);
    expect(workerCount('auto', 'router', false, 4)).toBe(4);
  });

  it('auto: one process with the embedded PostgreSQL, for the completion worker and the rules service', () => {
    expect(workerCount('auto', 'api', false, 8)).toBe(1);
    expect(workerCount('auto', 'worker', true, 8)).toBe(1);
    expect(workerCount('auto', 'rules-service', true, 8)).toBe(1);
  });

  it('auto stays within 1 to 256 whatever the host reports', () => {
    expect(workerCount('auto', 'api', true, 0)).toBe(1);
    expect(workerCount('auto', 'api', true, 512)).toBe(256);
  });

  it('auto stays within an explicit connection bound, which the workers share', () => {
    expect(workerCount('auto', 'api', true, 16, 8)).toBe(8);
    expect(workerCount('auto', 'router', false, 4, 8)).toBe(4);
  });

  it('a number is taken as given (the configuration refuses one the role cannot run)', () => {
    expect(workerCount(3, 'api', true, 8)).toBe(3);
    expect(workerCount(1, 'router', false, 8)).toBe(1);
    expect(runsOnWorkers('api', false)).toBe(false);
  });
});
