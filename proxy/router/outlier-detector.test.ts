import { describe, expect, it } from 'vitest';
import { BackendPool } from './backend-pool.ts';
import { storeStateOf } from './health-monitor.ts';
import { ejectionBound, MAX_EJECTION_MULTIPLIER, OutlierDetector } from './outlier-detector.ts';
import { gatewayStates } from './router-metrics.ts';

const BASE = 30_000;
const options = { consecutive5xx: 5, baseEjectionMs: BASE, maxEjectionPercent: 50 };

describe('outlier detection', () => {
  it('ejects after 5 consecutive failures, not 4; a success between starts the count again', () => {
    const d = new OutlierDetector(options);
    for (let i = 0; i < 4; i++) expect(d.record('a', true, 0, 3)).toBeUndefined();
    d.record('a', false, 0, 3);
    for (let i = 0; i < 4; i++) expect(d.record('a', true, 0, 3)).toBeUndefined();
    expect(d.record('a', true, 0, 3)).toEqual({ url: 'a', forMs: BASE, failuresInARow: 5 });
    expect(d.isEjected('a', BASE - 1)).toBe(true);
    expect(d.isEjected('a', BASE)).toBe(false);
  });

  it('the ejection grows with repeats (base × n, at most 10 ×) and shrinks by one per base period back in rotation', () => {
    const d = new OutlierDetector(options);
    let now = 0;
    const ejectNow = () => {
      let e: ReturnType<OutlierDetector['record']>;
      for (let i = 0; i < 5; i++) e = d.record('a', true, now, 3);
      return e!.forMs;
    };
    const lengths: number[] = [];
    for (let i = 0; i < 12; i++) {
      const forMs = ejectNow();
      lengths.push(forMs / BASE);
      now += forMs;
      // Back at once, failing again before a base period passed: no decay.
      expect(d.isEjected('a', now)).toBe(false);
    }
    expect(lengths).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10]);
    expect(MAX_EJECTION_MULTIPLIER).toBe(10);
    // Three base periods in rotation: 10 - 3 + 1.
    now += 3 * BASE;
    expect(ejectNow()).toBe(8 * BASE);
  });

  it('never ejects more than the bound, and never all: with every gateway failing, one of three is out', () => {
    expect(ejectionBound(1, 50)).toBe(0);
    expect(ejectionBound(2, 50)).toBe(1);
    expect(ejectionBound(3, 50)).toBe(1);
    expect(ejectionBound(4, 50)).toBe(2);
    expect(ejectionBound(3, 100)).toBe(2);
    expect(ejectionBound(10, 10)).toBe(1);
    expect(ejectionBound(3, 0)).toBe(0);
    const d = new OutlierDetector(options);
    for (let i = 0; i < 5; i++) for (const url of ['a', 'b', 'c']) d.record(url, true, 0, 3);
    expect(d.ejectedCount(0)).toBe(1);
    // Once the first is back, the next one failing is ejected in its turn.
    for (let i = 0; i < 5; i++) d.record('b', true, BASE, 3);
    expect(d.ejectedCount(BASE)).toBe(1);
    expect(d.isEjected('b', BASE)).toBe(true);
  });

  it('is off with consecutive5xx 0', () => {
    const d = new OutlierDetector({ ...options, consecutive5xx: 0 });
    for (let i = 0; i < 100; i++) expect(d.record('a', true, 0, 3)).toBeUndefined();
  });
});

describe('the pool: reads follow the store and the ejections', () => {
  function pool(now: { ms: number }) {
    const p = new BackendPool({ outlier: options, now: () => now.ms });
    p.update([
      { url: 'w', role: 'writer' },
      { url: 'r1', role: 'reader' },
      { url: 'r2', role: 'reader' },
    ]);
    for (const url of ['w', 'r1', 'r2']) p.recordProbe(url, true, 'ok');
    return p;
  }
  const reads = (p: BackendPool, n: number) => Array.from({ length: n }, () => p.pick('content-read')!.url);

  it('a gateway whose store is unreachable gets no reads; writes still go to a writer whose store is down', () => {
    const now = { ms: 0 };
    const p = pool(now);
    expect(p.recordStore('r1', 'unreachable')).toBe('unknown');
    expect(new Set(reads(p, 9))).toEqual(new Set(['w', 'r2']));
    p.recordStore('w', 'unreachable');
    expect(p.pick('write')?.url).toBe('w');
    expect(new Set(reads(p, 6))).toEqual(new Set(['r2']));
    // Back once its probe reports the store answering again (the gateway's own hysteresis).
    p.recordStore('r1', 'degraded');
    expect(new Set(reads(p, 6))).toEqual(new Set(['r1', 'r2']));
  });

  it("with every gateway's store unreachable, reads still go to every healthy gateway (they answer for themselves)", () => {
    const p = pool({ ms: 0 });
    for (const url of ['w', 'r1', 'r2']) p.recordStore(url, 'unreachable');
    expect(new Set(reads(p, 9))).toEqual(new Set(['w', 'r1', 'r2']));
    // The retry excludes the first gateway and still finds one.
    expect(p.pick('content-read', new Set(['w']))?.url).not.toBe('w');
  });

  it('an ejected gateway gets no reads until its ejection ends; it still takes writes', () => {
    const now = { ms: 0 };
    const p = pool(now);
    for (let i = 0; i < 5; i++) p.recordRead('w', true);
    expect(new Set(reads(p, 6))).toEqual(new Set(['r1', 'r2']));
    expect(p.pick('write')?.url).toBe('w');
    expect(gatewayStates(p.snapshot())).toEqual({ reads: 2, store_unreachable: 0, ejected: 1, down: 0 });
    now.ms = BASE;
    expect(new Set(reads(p, 9))).toEqual(new Set(['w', 'r1', 'r2']));
  });

  it("reads a gateway's store state from its /health/status body", () => {
    expect(storeStateOf('{"status":"serving","store":{"state":"unreachable"}}')).toBe('unreachable');
    expect(storeStateOf('{"status":"serving"}')).toBe('unknown');
    expect(storeStateOf('not json')).toBe('unknown');
    expect(storeStateOf('{"store":{"state":"weird"}}')).toBe('unknown');
  });
});
