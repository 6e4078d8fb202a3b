import { describe, expect, it } from 'vitest';
import { createUpstreamTargets } from './upstream-targets.ts';

function fixture() {
  const pooled = new Set<string>();
  const closed: string[] = [];
  let made = 0;
  const targets = createUpstreamTargets(
    (url) => pooled.has(url),
    (url) => ({
      url,
      serial: ++made,
      close: async () => {
        closed.push(url);
      },
    }),
  );
  return { pooled, closed, targets, made: () => made };
}

describe("the router's state per gateway URL", () => {
  it('is made once per URL and reused', () => {
    const { pooled, targets, made } = fixture();
    pooled.add('http://a:1');
    const first = targets.of('http://a:1');
    expect(targets.of('http://a:1')).toBe(first);
    expect(made()).toBe(1);
  });

  it('stays bounded by the pool under churn: a URL that left is closed once a new one is seen', () => {
    const { pooled, closed, targets } = fixture();
    // 1,000 restarts, each gateway at a new address (as pods are): at most the pool's two kept.
    pooled.add('http://steady:1');
    targets.of('http://steady:1');
    for (let i = 0; i < 1000; i++) {
      pooled.delete(`http://pod-${i - 1}:1`);
      pooled.add(`http://pod-${i}:1`);
      targets.of(`http://pod-${i}:1`);
      expect(targets.urls().length).toBeLessThanOrEqual(2);
    }
    expect(targets.urls().sort()).toEqual(['http://pod-999:1', 'http://steady:1']);
    expect(closed).toHaveLength(999);
    expect(closed).not.toContain('http://steady:1');
  });

  it('a URL that came back gets fresh state; one still pooled is never closed', () => {
    const { pooled, closed, targets } = fixture();
    pooled.add('http://a:1').add('http://b:1');
    const a = targets.of('http://a:1');
    targets.of('http://b:1');
    pooled.delete('http://a:1');
    expect(closed).toEqual([]); // nothing new seen yet: nothing swept
    pooled.add('http://c:1');
    targets.of('http://c:1');
    expect(closed).toEqual(['http://a:1']);
    pooled.add('http://a:1');
    expect(targets.of('http://a:1')).not.toBe(a);
    expect(closed).toEqual(['http://a:1']);
  });

  it('destroyAll hands every target over once and forgets them', () => {
    const { pooled, targets } = fixture();
    pooled.add('http://a:1').add('http://b:1');
    targets.of('http://a:1');
    targets.of('http://b:1');
    const destroyed: string[] = [];
    targets.destroyAll((t) => destroyed.push(t.url));
    expect(destroyed.sort()).toEqual(['http://a:1', 'http://b:1']);
    expect(targets.urls()).toEqual([]);
  });
});
