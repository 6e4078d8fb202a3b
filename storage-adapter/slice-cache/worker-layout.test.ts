import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { strayLayoutEntries, workerSliceCache } from './worker-layout.ts';

const MiB = 1024 * 1024;

describe('workerSliceCache', () => {
  it('gives each worker its own directory and a floor share of both bounds', () => {
    const bounds = { dir: '/var/cache/arkvory', maxBytes: 10 * MiB + 1, maxFiles: 641 };
    expect(workerSliceCache(bounds, 0, 2)).toEqual({
      dir: path.join('/var/cache/arkvory', 'w0'),
      maxBytes: 5 * MiB,
      maxFiles: 320,
    });
    expect(workerSliceCache(bounds, 2, 3).dir).toBe(path.join('/var/cache/arkvory', 'w2'));
  });

  it('never lets the shares of N workers sum past the bounds', () => {
    for (const workers of [2, 3, 7, 256])
      for (const maxBytes of [MiB, 10 * MiB + 1, 2 ** 40 - 1])
        for (const maxFiles of [1, 5, 655_360]) {
          const share = workerSliceCache({ dir: '/c', maxBytes, maxFiles }, 0, workers);
          expect(share.maxBytes * workers).toBeLessThanOrEqual(maxBytes);
          expect(share.maxFiles * workers).toBeLessThanOrEqual(maxFiles);
        }
  });

  it('gives no file to a worker when there are fewer files than workers (it relays instead)', () => {
    expect(workerSliceCache({ dir: '/c', maxBytes: MiB, maxFiles: 1 }, 1, 2).maxFiles).toBe(0);
  });
});

describe('strayLayoutEntries', () => {
  const names = ['slices', 'tmp', 'purges', 'w0', 'w1', 'w2', 'w10', 'w01', 'wx', 'lost+found', 'notes.txt'];

  it('for a single process: every worker directory', () => {
    expect(strayLayoutEntries(names, 1)).toEqual(['w0', 'w1', 'w2', 'w10']);
  });

  it('for N workers: the single process layout and workers at index N and beyond', () => {
    expect(strayLayoutEntries(names, 2)).toEqual(['slices', 'tmp', 'purges', 'w2', 'w10']);
    expect(strayLayoutEntries(names, 11)).toEqual(['slices', 'tmp', 'purges']);
  });

  it('leaves what is not the cache’s alone', () => {
    for (const workers of [1, 2, 4]) {
      const stray = strayLayoutEntries(names, workers);
      for (const other of ['w01', 'wx', 'lost+found', 'notes.txt']) expect(stray).not.toContain(other);
    }
  });
});
