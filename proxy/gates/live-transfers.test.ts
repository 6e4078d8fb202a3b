import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { LIVE_TRANSFERS_SHOWN, LiveTransfers } from './live-transfers.ts';

describe('LiveTransfers', () => {
  it('lists a transfer queued, then active with its bytes and age, and forgets it at the end', () => {
    const clock = new ManualClock();
    const live = new LiveTransfers(clock);
    let bytes = 0;
    const a = live.begin({
      kind: 'download',
      principal: 'ci',
      route: '/r/:repo',
      repository: 'libs',
      bytes: () => bytes,
    });
    const b = live.begin({ kind: 'upload', principal: 'ci', route: '/u', repository: undefined, bytes: () => 7 });
    expect(live.list().map((t) => [t.id, t.state])).toEqual([
      [1, 'queued'],
      [2, 'queued'],
    ]);
    a.admitted();
    clock.advance(1500);
    bytes = 4096;
    expect(live.list()[0]).toEqual({
      id: 1,
      kind: 'download',
      state: 'active',
      principal: 'ci',
      route: '/r/:repo',
      repository: 'libs',
      seconds: 1.5,
      bytes: 4096,
    });
    expect(live.list()[1]).toMatchObject({ repository: null, bytes: 7 });
    a.end();
    b.end();
    b.end();
    expect(live.list()).toEqual([]);
  });

  it(`lists the oldest ${LIVE_TRANSFERS_SHOWN} and counts them all: queues are per principal, so the table has no bound of its own`, () => {
    const clock = new ManualClock();
    const live = new LiveTransfers(clock);
    const handles = Array.from({ length: LIVE_TRANSFERS_SHOWN + 5 }, (_, i) =>
      live.begin({ kind: 'download', principal: `p${i}`, route: '/r', repository: 'libs', bytes: () => i }),
    );
    expect(live.size).toBe(LIVE_TRANSFERS_SHOWN + 5);
    const shown = live.list();
    expect(shown).toHaveLength(LIVE_TRANSFERS_SHOWN);
    expect(shown.map((t) => t.principal)).toEqual(Array.from({ length: LIVE_TRANSFERS_SHOWN }, (_, i) => `p${i}`));
    // One that ends makes room for the next oldest.
    handles[0]!.end();
    expect(live.list().at(-1)!.principal).toBe(`p${LIVE_TRANSFERS_SHOWN}`);
    expect([live.size, live.list(3).map((t) => t.principal)]).toEqual([LIVE_TRANSFERS_SHOWN + 4, ['p1', 'p2', 'p3']]);
  });
});
