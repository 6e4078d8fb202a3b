import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../policy/clock.ts';
import { PolicyError } from '../../policy/errors.ts';
import { LIVE_TRANSFERS_SHOWN, LiveTransfers, RECHECK_CONCURRENCY, recheckOnChange } from './live-transfers.ts';

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

describe('LiveTransfers.recheck and recheckOnChange (running transfers asked again)', () => {
  const base = { kind: 'download' as const, principal: 'ci', route: '/r', repository: 'libs', bytes: () => 0 };

  it('cuts each transfer refused with 401, 403 or 404, keeps the others, and says retry when one could not be told', async () => {
    const live = new LiveTransfers(new ManualClock());
    const cut: string[] = [];
    const entry = (name: string, ask: () => undefined | Promise<void>) =>
      live.begin({
        ...base,
        principal: name,
        stillAuthorized: ask,
        cut: (err) => cut.push(`${name}:${(err as PolicyError).code}`),
      });
    entry('fine', () => undefined);
    entry('revoked', () => {
      throw new PolicyError('unauthorized');
    });
    entry('ungranted', () => Promise.reject(new PolicyError('not_found')));
    entry('lowered', () => Promise.reject(new PolicyError('forbidden')));
    const ended = entry('ended', () => {
      throw new PolicyError('unauthorized');
    });
    ended.end();
    live.begin(base); // an upload: not asked
    expect(await live.recheck()).toBe('done');
    expect(cut.sort()).toEqual(['lowered:forbidden', 'revoked:unauthorized', 'ungranted:not_found']);

    cut.length = 0;
    entry('unreachable', () => Promise.reject(new PolicyError('unavailable')));
    expect(await live.recheck()).toBe('retry');
    expect(cut).not.toContain(expect.stringMatching(/^unreachable/));
  });

  it('asks at most RECHECK_CONCURRENCY at once, so the first answer for a key can fill the cache for the rest', async () => {
    const live = new LiveTransfers(new ManualClock());
    let inFlight = 0;
    let most = 0;
    let asked = 0;
    for (let i = 0; i < 3 * RECHECK_CONCURRENCY; i++)
      live.begin({
        ...base,
        stillAuthorized: async () => {
          asked++;
          most = Math.max(most, ++inFlight);
          await new Promise((r) => setTimeout(r, 1));
          inFlight--;
        },
      });
    expect(await live.recheck()).toBe('done');
    expect(asked).toBe(3 * RECHECK_CONCURRENCY);
    expect(most).toBe(RECHECK_CONCURRENCY);
  });

  it('runs a round on each change, one at a time (a change during a round runs one more), and retries a round that could not tell', async () => {
    const live = new LiveTransfers(new ManualClock());
    let listener: (() => void) | undefined;
    let asked = 0;
    let answer: () => Promise<void> = () => Promise.resolve();
    let cuts = 0;
    live.begin({
      ...base,
      stillAuthorized: () => {
        asked++;
        return answer();
      },
      cut: () => cuts++,
    });
    const stop = recheckOnChange(live, (l) => (listener = l), 20);
    const settle = () => new Promise((r) => setTimeout(r, 5));
    listener!();
    await settle();
    expect(asked).toBe(1);

    // A change while a round waits for its answer: exactly one more round after it.
    let release!: () => void;
    answer = () => new Promise<void>((r) => (release = r));
    listener!();
    await settle();
    listener!();
    listener!();
    await settle();
    expect(asked).toBe(2);
    answer = () => Promise.resolve();
    release();
    await settle();
    expect(asked).toBe(3);

    // Out of reach: asked again after the retry interval until it can tell; then refused, cut.
    answer = () => Promise.reject(new PolicyError('unavailable'));
    listener!();
    await settle();
    expect(asked).toBe(4);
    answer = () => Promise.reject(new PolicyError('unauthorized'));
    await new Promise((r) => setTimeout(r, 40));
    expect(asked).toBeGreaterThanOrEqual(5);
    expect(cuts).toBeGreaterThanOrEqual(1);

    stop();
    const after = asked;
    listener!();
    await new Promise((r) => setTimeout(r, 40));
    expect(asked).toBe(after);
  });
});
