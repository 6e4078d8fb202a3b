import { describe, expect, it } from 'vitest';
import { UsageTally, utcDay } from './usage-tally.ts';

const key = { repository: 'r', kind: 'artifact', name: 'a.bin', version: '', asset: '' } as const;
const T0 = Date.UTC(2026, 11, 2, 23, 59, 59);

describe('UsageTally', () => {
  it('sums downloads and bytes per artifact; the latest download names the last downloader', () => {
    const t = new UsageTally();
    t.download(key, 10, 'p1', T0 + 5);
    t.download(key, 20, 'p2', T0 + 1); // finished later, started earlier: not the latest
    t.download({ ...key, name: 'b.bin' }, 7, null, T0);
    const batch = t.drain();
    expect(batch.artifacts).toEqual([
      { key, downloads: 2, bytes: 30, lastAtMs: T0 + 5, lastDownloader: 'p1' },
      { key: { ...key, name: 'b.bin' }, downloads: 1, bytes: 7, lastAtMs: T0, lastDownloader: null },
    ]);
    expect(t.size).toBe(0);
    expect(t.drain()).toEqual({ artifacts: [], principalDays: [] });
  });

  it('counts requests per principal and UTC day', () => {
    const t = new UsageTally();
    t.request('p1', 100, 5, T0);
    t.request('p1', 50, 1, T0 + 1000); // the next UTC day
    t.request('p1', 1, 1, T0 - 1000);
    expect(t.size).toBe(2);
    expect(t.drain().principalDays).toEqual([
      { principalId: 'p1', day: '2026-12-02', requests: 2, bytesDown: 101, bytesUp: 6 },
      { principalId: 'p1', day: '2026-12-03', requests: 1, bytesDown: 50, bytesUp: 1 },
    ]);
    expect(utcDay(T0)).toBe('2026-12-02');
  });

  it('puts the last millisecond of a day and the first of the next on their own days, in any order', () => {
    const t = new UsageTally();
    const midnight = Date.UTC(2026, 11, 3);
    for (const at of [midnight, midnight - 1, midnight + 86_400_000 - 1, midnight - 86_400_000, midnight + 86_400_000])
      t.request('p1', 1, 0, at);
    expect(t.drain().principalDays.map((d) => [d.day, d.requests])).toEqual([
      ['2026-12-03', 2],
      ['2026-12-02', 2],
      ['2026-12-04', 1],
    ]);
  });

  it('a failed batch given back merges with what came since: nothing counted twice or lost', () => {
    const t = new UsageTally();
    t.download(key, 10, 'p1', T0);
    t.request('p1', 10, 0, T0);
    const failed = t.drain();
    t.download(key, 5, 'p2', T0 + 10);
    t.request('p1', 1, 1, T0);
    t.restore(failed);
    const merged = t.drain();
    expect(merged.artifacts).toEqual([{ key, downloads: 2, bytes: 15, lastAtMs: T0 + 10, lastDownloader: 'p2' }]);
    expect(merged.principalDays).toEqual([
      { principalId: 'p1', day: '2026-12-02', requests: 2, bytesDown: 11, bytesUp: 1 },
    ]);
  });

  it('holds at most its capacity of rows: counts of a row past it are dropped and counted, rows held go on summing', () => {
    const t = new UsageTally(2);
    t.download(key, 10, 'p1', T0);
    t.request('p1', 1, 1, T0);
    t.download({ ...key, name: 'b.bin' }, 7, 'p1', T0);
    t.request('p2', 1, 1, T0);
    t.download(key, 5, 'p1', T0 + 1);
    t.request('p1', 1, 1, T0 + 1);
    expect(t.size).toBe(2);
    expect(t.dropped).toEqual({ downloads: 1, requests: 1 });
    const batch = t.drain();
    expect(batch.artifacts).toEqual([{ key, downloads: 2, bytes: 15, lastAtMs: T0 + 1, lastDownloader: 'p1' }]);
    expect(batch.principalDays).toEqual([
      { principalId: 'p1', day: '2026-12-02', requests: 2, bytesDown: 2, bytesUp: 2 },
    ]);
    // A batch given back merges into the rows held and fits where it can; the rest is counted.
    t.capacity = 1;
    t.request('p3', 1, 1, T0);
    t.restore(batch);
    expect(t.size).toBe(1);
    expect(t.dropped).toEqual({ downloads: 3, requests: 3 });
  });
});
