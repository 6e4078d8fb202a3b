import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { STORE_STATES, StoreHealth, storeHealthBody, storeHealthOptions } from './store-health.ts';
import { probeStore } from './store-monitor.ts';
import { storeFaultCode } from './tracked-store.ts';

const PERIOD = 1000;

function fresh() {
  const clock = new ManualClock();
  const health = new StoreHealth(storeHealthOptions(PERIOD), clock);
  const moves: string[] = [];
  health.onTransition((t) => moves.push(`${t.from}>${t.to}`));
  return { clock, health, moves };
}

describe('store health state machine', () => {
  it('one failure degrades, the second in a row makes the store unreachable, with the code and time', () => {
    const { clock, health, moves } = fresh();
    health.recordProbe(undefined);
    expect(health.state).toBe('ok');
    clock.advance(PERIOD);
    health.recordProbe('upstream_timeout');
    expect(health.state).toBe('degraded');
    clock.advance(PERIOD);
    const failedAt = clock.wallMs();
    health.recordRequest('upstream_unreachable');
    expect(health.state).toBe('unreachable');
    expect(moves).toEqual(['ok>degraded', 'degraded>unreachable']);
    expect(storeHealthBody(health.snapshot())).toEqual({
      state: 'unreachable',
      since: new Date(failedAt).toISOString(),
      lastError: { code: 'upstream_unreachable', at: new Date(failedAt).toISOString() },
    });
  });

  it('detection bound: a silent store is unreachable at the second failed probe, at most 2 periods plus one probe timeout after it fell silent', () => {
    const { clock, health } = fresh();
    // Probes start every PERIOD and fail 0.9 PERIOD later; the store falls silent just after a probe began.
    const fellSilentAt = clock.monotonicMs();
    let detectedAt: number | undefined;
    health.onTransition((t) => {
      if (t.to === 'unreachable') detectedAt = clock.monotonicMs();
    });
    for (let probe = 1; detectedAt === undefined; probe++) {
      clock.advance(probe === 1 ? 0.9 * PERIOD : PERIOD);
      health.recordProbe(probe === 1 ? undefined : 'upstream_timeout');
    }
    expect(detectedAt! - fellSilentAt).toBeLessThanOrEqual(2 * PERIOD + 0.9 * PERIOD);
  });

  it('a store call that succeeds resets the count: alternating failure and success never makes it unreachable', () => {
    const { health } = fresh();
    for (let i = 0; i < 10; i++) {
      health.recordRequest('upstream_timeout');
      health.recordRequest(undefined);
    }
    expect(health.state).toBe('degraded');
  });

  it('hysteresis: back only after 2 passing probes in a row; a failure between starts again; ok after 2 quiet periods', () => {
    const { clock, health, moves } = fresh();
    health.recordProbe('upstream_unreachable');
    health.recordProbe('upstream_unreachable');
    expect(health.state).toBe('unreachable');
    // A flapping store: pass, fail, pass, fail … stays out.
    for (let i = 0; i < 5; i++) {
      clock.advance(PERIOD);
      health.recordProbe(undefined);
      clock.advance(PERIOD);
      health.recordProbe('upstream_unreachable');
      expect(health.state).toBe('unreachable');
    }
    // Real calls cannot bring it back.
    health.recordRequest(undefined);
    health.recordRequest(undefined);
    expect(health.state).toBe('unreachable');
    clock.advance(PERIOD);
    health.recordProbe(undefined);
    expect(health.state).toBe('unreachable');
    clock.advance(PERIOD);
    health.recordProbe(undefined);
    expect(health.state).toBe('degraded');
    // The last failure is 2 periods old by now: the next passing probe makes it `ok`.
    clock.advance(PERIOD);
    health.recordProbe(undefined);
    expect(health.state).toBe('ok');
    // From `ok`, one failure degrades for 2 periods of passing probes.
    health.recordRequest('upstream_timeout');
    clock.advance(2 * PERIOD - 1);
    health.recordProbe(undefined);
    expect(health.state).toBe('degraded');
    clock.advance(1);
    health.recordProbe(undefined);
    expect(health.state).toBe('ok');
    expect(moves.slice(-5)).toEqual([
      'degraded>unreachable',
      'unreachable>degraded',
      'degraded>ok',
      'ok>degraded',
      'degraded>ok',
    ]);
  });

  it('refuses fall or rise below 1; 1 each is the most eager machine', () => {
    for (const options of [
      { fall: 0, rise: 1, quietMs: 1 },
      { fall: 1, rise: 0, quietMs: 1 },
    ])
      expect(() => new StoreHealth(options, new ManualClock())).toThrow(
        new RangeError('fall and rise must be at least 1'),
      );
    const health = new StoreHealth({ fall: 1, rise: 1, quietMs: 0 }, new ManualClock());
    expect(health.recordProbe('upstream_timeout')?.to).toBe('unreachable');
    expect(health.recordProbe(undefined)?.to).toBe('degraded');
    expect(health.recordProbe(undefined)?.to).toBe('ok');
  });

  it('each transition names what caused it, and a failure while unreachable moves nothing', () => {
    const { health } = fresh();
    const causes: string[] = [];
    health.onTransition((t) => causes.push(`${t.from}>${t.to} by ${t.cause}`));
    health.recordProbe('upstream_timeout');
    health.recordRequest('upstream_unreachable');
    expect(health.isUnreachable).toBe(true);
    // More failures of either kind while unreachable: no transition, the count goes on.
    expect(health.recordRequest('upstream_unreachable')).toBeUndefined();
    expect(health.recordProbe('upstream_timeout')).toBeUndefined();
    expect(health.snapshot().failuresInARow).toBe(4);
    // A call that slipped through while unreachable proves little: the count stays.
    expect(health.recordRequest(undefined)).toBeUndefined();
    expect(health.snapshot().failuresInARow).toBe(4);
    expect(health.isUnreachable).toBe(true);
    health.recordProbe(undefined);
    expect(health.snapshot().failuresInARow).toBe(0);
    health.recordProbe(undefined);
    expect(health.isUnreachable).toBe(false);
    expect(causes).toEqual([
      'ok>degraded by probe',
      'degraded>unreachable by request',
      'unreachable>degraded by probe',
    ]);
    // From ok, a failed call degrades by request.
    const other = fresh();
    expect(other.health.recordRequest('upstream_timeout')).toMatchObject({
      from: 'ok',
      to: 'degraded',
      cause: 'request',
    });
  });

  it('tells its failure listeners of every failure, probe or call, unreachable or not', () => {
    const { health } = fresh();
    const seen: string[] = [];
    health.onFailure((source, code) => seen.push(`${source}:${code}`));
    health.recordProbe('upstream_timeout');
    health.recordRequest(undefined);
    health.recordRequest('upstream_unreachable');
    health.recordRequest('upstream_unreachable');
    health.recordProbe('storage_mismatch');
    expect(seen).toEqual([
      'probe:upstream_timeout',
      'request:upstream_unreachable',
      'request:upstream_unreachable',
      'probe:storage_mismatch',
    ]);
  });

  it('the states a metric labels, in order', () => {
    expect(STORE_STATES).toEqual(['ok', 'degraded', 'unreachable']);
  });
});

describe('store probe and store-call faults', () => {
  const id = '0b4c1d6e-7d7e-4f53-9a54-1f1d2c3b4a59';
  it('passes when storage-id holds our id, names a mismatch, a missing file, an error and a timeout', async () => {
    expect(await probeStore({ read: async () => `${id}\n` }, id, 100)).toBeUndefined();
    expect((await probeStore({ read: async () => 'other' }, id, 100))?.code).toBe('storage_mismatch');
    expect((await probeStore({ read: async () => undefined }, id, 100))?.code).toBe('storage_mismatch');
    const eio = Object.assign(new Error('i/o error'), { code: 'EIO' });
    expect((await probeStore({ read: () => Promise.reject(eio) }, id, 100))?.code).toBe('upstream_unreachable');
    const coded = Object.assign(new Error('refused'), { code: 'upstream_timeout' });
    expect((await probeStore({ read: () => Promise.reject(coded) }, id, 100))?.code).toBe('upstream_timeout');
    const started = performance.now();
    expect((await probeStore({ read: () => new Promise(() => {}) }, id, 60))?.code).toBe('upstream_timeout');
    expect(performance.now() - started).toBeGreaterThanOrEqual(55);
  });

  it('a process that stood still past the deadline does not count its own stall as the store timing out; a silent store still does', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'probe-'));
    try {
      await writeFile(path.join(dir, 'storage-id'), `${id}\n`);
      const standStill = (ms: number) => {
        const until = performance.now() + ms;
        while (performance.now() < until);
      };
      // The file's answer comes through the thread pool and the event loop's poll phase, after the
      // timers phase that finds the deadline passed: before, that order made this an upstream_timeout.
      // A stall of three bounds, then a bound's worth of steps left for the read's answer: wide enough
      // for a loaded machine's thread pool, and the old single timer still failed it every time.
      const probing = probeStore({ read: () => readFile(path.join(dir, 'storage-id'), 'utf8') }, id, 200);
      standStill(600);
      expect(await probing).toBeUndefined();
      // A store that never answers fails, within a few bounds after the stall (its steps may run late too).
      const started = performance.now();
      const silent = probeStore({ read: () => new Promise(() => {}) }, id, 200);
      standStill(600);
      expect((await silent)?.code).toBe('upstream_timeout');
      expect(performance.now() - started).toBeLessThan(600 + 3 * 200);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("counts only the store's own failures: not_found and client faults are the store doing its job", () => {
    expect(storeFaultCode({ code: 'upstream_timeout' })).toBe('upstream_timeout');
    expect(storeFaultCode({ code: 'ENOTCONN' })).toBe('upstream_unreachable');
    expect(storeFaultCode({ code: 'not_found' })).toBeUndefined();
    expect(storeFaultCode({ code: 'invalid_request' })).toBeUndefined();
    expect(storeFaultCode(new Error('plain'))).toBeUndefined();
  });
});
