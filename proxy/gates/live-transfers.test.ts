import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { LiveTransfers } from './live-transfers.ts';

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
});
