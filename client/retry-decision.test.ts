import { describe, expect, it } from 'vitest';
import { backoffMs, decide, mirrorUrl, publishedSha256, retryAfterMs, strongEtag } from './retry-decision.ts';

const SHA = 'ab'.repeat(32);
const REPR = `sha-256=:${Buffer.from(SHA, 'hex').toString('base64')}:`;

describe('resuming client decisions', () => {
  it('keeps a 206 that starts at the offset, and restarts on a 200 to a ranged request', () => {
    expect(decide(206, { 'content-range': 'bytes 100-999/1000', etag: `"${SHA}"`, 'repr-digest': REPR }, 100)).toEqual({
      kind: 'body',
      offset: 100,
      end: 1000,
      total: 1000,
      etag: `"${SHA}"`,
      digestHex: SHA,
    });
    expect(decide(206, { 'content-range': 'bytes 0-999/1000', etag: `"${SHA}"` }, 100)).toMatchObject({
      kind: 'protocol',
    });
    expect(decide(200, { 'content-length': '1000', etag: `"${SHA}"` }, 100)).toEqual({
      kind: 'body',
      offset: 0,
      end: 1000,
      total: 1000,
      etag: `"${SHA}"`,
      digestHex: SHA,
    });
  });

  it('restarts on a 206 of another representation than the If-Range asked to continue', () => {
    const other = `"${'cd'.repeat(32)}"`;
    const headers = { 'content-range': 'bytes 100-999/1000', etag: other };
    const held = { etag: `"${SHA}"`, total: 1000 };
    expect(decide(206, headers, 100, held)).toEqual({ kind: 'restart' });
    expect(decide(206, { 'content-range': 'bytes 100-999/1000' }, 100, held)).toEqual({ kind: 'restart' });
    expect(decide(206, headers, 100, { etag: other, total: 1000 }).kind).toBe('body');
  });

  it('refuses a 206 of the same representation whose Content-Range is not the range asked, its body unread', () => {
    const etag = `"${SHA}"`;
    const held = { etag, total: 1000 };
    const asked = (range: string | undefined, more: Record<string, string> = {}) =>
      decide(206, { ...(range === undefined ? {} : { 'content-range': range }), etag, ...more }, 100, held);
    for (const [range, why] of [
      [undefined, /\(none\) is not one range of a known length/],
      ['bytes 100-999/*', /is not one range of a known length/],
      ['bytes 50-999/1000', /does not start at byte 100/],
      ['bytes 100-99/1000', /is not within the length it gives/],
      ['bytes 100-1999/1000', /is not within the length it gives/],
      ['bytes 100-1999/2000', /gives another length than 1000 for the same ETag/],
    ] as const) {
      const decision = asked(range);
      expect(decision.kind, range).toBe('protocol');
      expect((decision as { reason: string }).reason).toMatch(why);
    }
    expect(asked('bytes 100-999/1000', { 'content-length': '1900' })).toMatchObject({
      kind: 'protocol',
      reason: expect.stringMatching(/is not as long as its Content-Length/),
    });
    expect(asked('bytes 100-199/1000', { 'content-length': '100' }).kind).toBe('body');
    expect(asked('bytes 100-999/1000').kind).toBe('body');
    // Where its body must end, also without a Content-Length (chunked): the range's last byte + 1.
    expect(asked('bytes 100-199/1000')).toMatchObject({ kind: 'body', offset: 100, end: 200 });
    expect(decide(200, { etag: `"${SHA}"` }, 0)).toMatchObject({ kind: 'body', end: undefined, total: -1 });
  });

  it('takes a 416 at the offset as the end only when the bytes held may be the whole', () => {
    const range = { 'content-range': 'bytes */500' };
    expect(decide(416, range, 500, { etag: `"${SHA}"`, total: 1000 })).toEqual({ kind: 'restart' });
    expect(decide(416, range, 500, { etag: `"${SHA}"`, total: -1 })).toEqual({ kind: 'complete' });
  });

  it('takes a 416 of another ETag as another representation, even where the bytes held end', () => {
    const held = { etag: `"${SHA}"`, total: 500 };
    const other = { 'content-range': 'bytes */500', etag: `"${'cd'.repeat(32)}"` };
    expect(decide(416, other, 500, held)).toEqual({ kind: 'restart' });
    expect(decide(416, { ...other, etag: `"${SHA}"` }, 500, held)).toEqual({ kind: 'complete' });
  });

  it('treats 416 at the end as complete and before it as a restart', () => {
    expect(decide(416, { 'content-range': 'bytes */1000' }, 1000)).toEqual({ kind: 'complete' });
    expect(decide(416, { 'content-range': 'bytes */500' }, 1000)).toEqual({ kind: 'restart' });
  });

  it('waits on 429, fails over on 502/503/504 and fails on other refusals', () => {
    expect(decide(429, {}, 0).kind).toBe('wait');
    for (const s of [502, 503, 504]) expect(decide(s, {}, 0).kind).toBe('failover');
    for (const s of [400, 401, 403, 404, 409, 500]) expect(decide(s, {}, 0).kind).toBe('fail');
  });

  it('reads Retry-After as seconds or a date, bounded', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs({ 'retry-after': '3' }, now, 1000, 60_000)).toBe(3000);
    expect(retryAfterMs({ 'retry-after': 'Thu, 01 Jan 2026 00:00:05 GMT' }, now, 1000, 60_000)).toBe(5000);
    expect(retryAfterMs({ 'retry-after': '3600' }, now, 1000, 60_000)).toBe(60_000);
    expect(retryAfterMs({ 'retry-after': 'Wed, 31 Dec 2025 00:00:00 GMT' }, now, 1000, 60_000)).toBe(0);
    expect(retryAfterMs({}, now, 1000, 60_000)).toBe(1000);
  });

  it('uses only strong validators and the published sha-256', () => {
    expect(strongEtag({ etag: 'W/"x"' })).toBeUndefined();
    expect(strongEtag({ etag: '"x"' })).toBe('"x"');
    expect(publishedSha256({ 'repr-digest': REPR })).toBe(SHA);
    expect(publishedSha256({ etag: `"${SHA}"` })).toBe(SHA);
    expect(publishedSha256({ etag: '"short"' })).toBeUndefined();
  });

  it('backs off 250 ms doubling to 5 s, and maps mirrors onto the same path', () => {
    expect([1, 2, 3, 4, 5, 6, 10].map(backoffMs)).toEqual([250, 500, 1000, 2000, 4000, 5000, 5000]);
    expect(mirrorUrl('http://a:1/api/x/content?q=1', 'http://b:2')).toBe('http://b:2/api/x/content?q=1');
    expect(mirrorUrl('http://a:1/api/x/content', 'http://b:2/other/path')).toBe('http://b:2/other/path');
  });
});
