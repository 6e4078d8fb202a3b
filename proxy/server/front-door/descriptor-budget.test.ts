import { describe, expect, it } from 'vitest';
import {
  defaultMaxConnections,
  describeShortfall,
  descriptorsNeeded,
  OVERFLOW_ANSWERED,
  parseMaxOpenFiles,
  planFrontDoor,
  RESERVED_DESCRIPTORS,
} from './descriptor-budget.ts';
import { defaultMaxPendingHandshakes } from './pending-handshakes.ts';

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            65536                524288               files
Max locked memory         8388608              8388608              bytes
`;

describe('parseMaxOpenFiles', () => {
  it('reads the soft limit of /proc/<pid>/limits', () => {
    expect(parseMaxOpenFiles(LIMITS)).toBe(65536);
  });

  it('is undefined when the line is missing, unlimited or not a number', () => {
    expect(parseMaxOpenFiles('Limit Soft Hard Units\nMax cpu time unlimited unlimited seconds\n')).toBeUndefined();
    expect(
      parseMaxOpenFiles('Max open files            unlimited            unlimited            files\n'),
    ).toBeUndefined();
    expect(parseMaxOpenFiles('Max open files            -1            4            files\n')).toBeUndefined();
    expect(parseMaxOpenFiles('')).toBeUndefined();
  });
});

describe('descriptorsNeeded', () => {
  it('two per connection, the answered overflow, the reserve, and on TLS the handshakes in progress', () => {
    expect(descriptorsNeeded(100, false)).toBe(200 + OVERFLOW_ANSWERED + RESERVED_DESCRIPTORS);
    expect(descriptorsNeeded(800, true)).toBe(1600 + 100 + OVERFLOW_ANSWERED + RESERVED_DESCRIPTORS);
    // The handshakes' floor of 16 counts at small bounds.
    expect(descriptorsNeeded(8, true)).toBe(16 + 16 + OVERFLOW_ANSWERED + RESERVED_DESCRIPTORS);
  });
});

describe('defaultMaxConnections', () => {
  it('on plain HTTP leaves the reserve and the answered overflow, then two descriptors per connection', () => {
    expect(defaultMaxConnections(1024)).toBe(Math.floor((1024 - RESERVED_DESCRIPTORS - OVERFLOW_ANSWERED) / 2));
    expect(defaultMaxConnections(256)).toBe(80);
    expect(defaultMaxConnections(65536)).toBe(32720);
  });

  it("on TLS leaves room for the handshakes in progress too: the units' LimitNOFILE=65536 holds both", () => {
    const bound = defaultMaxConnections(65536, true);
    expect(bound).toBe(30795);
    expect(defaultMaxPendingHandshakes(bound)).toBe(3849);
    // The bound this replaced (32,720 connections and 4,090 handshakes) needed more than the limit.
    expect(descriptorsNeeded(32720, true)).toBeGreaterThan(65536);
  });

  it('is the largest bound that fits, on TLS or not, at every limit', () => {
    for (const tls of [false, true]) {
      for (const limit of [160, 200, 256, 1000, 1024, 2048, 4096, 65536, 1048576]) {
        const bound = defaultMaxConnections(limit, tls);
        expect(descriptorsNeeded(bound, tls)).toBeLessThanOrEqual(limit);
        expect(descriptorsNeeded(bound + 1, tls)).toBeGreaterThan(limit);
      }
    }
  });

  it('never drops below a small working floor', () => {
    expect(defaultMaxConnections(64)).toBe(8);
    expect(defaultMaxConnections(64, true)).toBe(8);
  });
});

describe('planFrontDoor', () => {
  it('derives a bound that fits the limit, per process whatever the workers', () => {
    const plan = planFrontDoor({ limit: 2048, configured: undefined, workers: 4, tls: true });
    expect(plan).toMatchObject({
      maxConnections: 919,
      maxPendingHandshakes: 114,
      limit: 2048,
      limitKnown: true,
      needed: 2 * 919 + 114 + OVERFLOW_ANSWERED + RESERVED_DESCRIPTORS,
      verdict: 'fits',
      largestConfigurable: 4 * 919,
    });
  });

  it('has no handshakes in progress on plain HTTP', () => {
    expect(planFrontDoor({ limit: 1024, configured: undefined, workers: 1, tls: false })).toMatchObject({
      maxConnections: 464,
      maxPendingHandshakes: 0,
      verdict: 'fits',
    });
  });

  it('honours a configured bound that fits, split between the workers', () => {
    expect(planFrontDoor({ limit: 1024, configured: 800, workers: 2, tls: true })).toMatchObject({
      maxConnections: 400,
      maxPendingHandshakes: 50,
      verdict: 'fits',
    });
  });

  it('refuses a configured bound the limit cannot hold, naming the variable and the numbers', () => {
    const input = { limit: 65536, configured: 32720, workers: 1, tls: true };
    const plan = planFrontDoor(input);
    expect(plan).toMatchObject({ maxConnections: 32720, verdict: 'too_high', largestConfigurable: 30795 });
    expect(describeShortfall(plan, input)).toBe(
      "ARKVORY_MAX_CONNECTIONS=32720 cannot be honoured: it needs 2 × 32720 connections + 4090 TLS handshakes in progress + 32 refusals answered + 64 for the gateway's own = 69626 descriptors, above the descriptor limit of 65536 (ulimit -n, systemd LimitNOFILE); set it to at most 30795 or raise the limit",
    );
  });

  it('judges a configured bound per worker, against each worker’s own limit', () => {
    const input = { limit: 1024, configured: 2000, workers: 4, tls: false };
    const plan = planFrontDoor(input);
    expect(plan).toMatchObject({ maxConnections: 500, verdict: 'too_high', largestConfigurable: 4 * 464 });
    expect(describeShortfall(plan, input)).toContain(
      '= 1096 descriptors per worker of 4, above the descriptor limit of 1024',
    );
  });

  it('warns, and still starts, when the limit is below even the smallest derived bound', () => {
    const input = { limit: 100, configured: undefined, workers: 1, tls: true };
    const plan = planFrontDoor(input);
    expect(plan).toMatchObject({ maxConnections: 8, verdict: 'short', largestConfigurable: 0 });
    expect(describeShortfall(plan, input)).toBe(
      "the descriptor limit is below what the smallest connection bound needs: 2 × 8 connections + 16 TLS handshakes in progress + 32 refusals answered + 64 for the gateway's own = 128 descriptors, above the descriptor limit of 100 (ulimit -n, systemd LimitNOFILE); raise the limit (clients may meet EMFILE failures)",
    );
    const configured = { ...input, configured: 8 };
    expect(describeShortfall(planFrontDoor(configured), configured)).toMatch(/; raise the limit$/);
  });

  it('cannot refuse against an unknown limit: it assumes 1024 for a derived bound only', () => {
    expect(planFrontDoor({ limit: undefined, configured: 100000, workers: 1, tls: false })).toMatchObject({
      maxConnections: 100000,
      limitKnown: false,
      verdict: 'fits',
    });
    expect(planFrontDoor({ limit: undefined, configured: undefined, workers: 1, tls: false })).toMatchObject({
      maxConnections: 464,
      limit: 1024,
    });
  });
});
