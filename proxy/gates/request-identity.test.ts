import { describe, expect, it } from 'vitest';
import { clientAddress, createTrustedProxies } from '../router/forwarded.ts';
import type { RequestContext } from '../server/route-types.ts';
import { clientIp, clientKey, requestIdentifier } from './request-identity.ts';

const loopback = createTrustedProxies(['127.0.0.1', '::1']);
const none = createTrustedProxies([]);

function ctxOf(remoteAddress: string | undefined, headers: Record<string, string>): RequestContext {
  return { req: { socket: { remoteAddress }, headers } } as unknown as RequestContext;
}

describe('clientIp', () => {
  it('is the canonical peer, or behind a trusted proxy the forwarded client, on every request alike', () => {
    const cases: Array<[string | undefined, Record<string, string>, string, string]> = [
      ['::ffff:203.0.113.9', {}, '203.0.113.9', '203.0.113.9'],
      ['2001:DB8:0::1', {}, '2001:db8::1', '2001:db8::1'],
      ['127.0.0.1', {}, '127.0.0.1', '127.0.0.1'],
      ['127.0.0.1', { 'x-forwarded-for': '198.51.100.1' }, '198.51.100.1', '127.0.0.1'],
      ['10.0.0.2', { 'x-forwarded-for': '198.51.100.1' }, '10.0.0.2', '10.0.0.2'],
      ['127.0.0.1', { forwarded: 'for=198.51.100.2;proto=http' }, '198.51.100.2', '127.0.0.1'],
      ['127.0.0.1', { forwarded: 'for="[2001:DB8::2]:4711"' }, '2001:db8::2', '127.0.0.1'],
      ['127.0.0.1', { forwarded: 'for=_hidden' }, '127.0.0.1', '127.0.0.1'],
      ['10.0.0.2', { forwarded: 'for=198.51.100.2' }, '10.0.0.2', '10.0.0.2'],
      [undefined, {}, '', ''],
    ];
    for (let pass = 0; pass < 2; pass++)
      for (const [address, headers, behindLoopback, untrusted] of cases) {
        const ctx = ctxOf(address, headers);
        expect(clientIp(ctx, loopback)).toBe(behindLoopback);
        expect(clientIp(ctx, none)).toBe(untrusted);
        expect(clientIp(ctx, loopback)).toBe(clientAddress(ctx.req, loopback));
      }
  });

  it('stays right past the bound of remembered peers', () => {
    for (let i = 0; i < 1100; i++) {
      const address = `198.18.${i >> 8}.${i & 255}`;
      expect(clientIp(ctxOf(`::ffff:${address}`, {}), none)).toBe(address);
    }
    expect(clientIp(ctxOf('::ffff:203.0.113.9', {}), none)).toBe('203.0.113.9');
  });
});

describe('requestIdentifier: the ip per-address limits count by', () => {
  const ctxFor = (remoteAddress: string, headers: Record<string, string> = {}) =>
    ({
      ...ctxOf(remoteAddress, headers),
      route: '/api/v1/repositories/:repo/artifacts/:id',
      params: {},
    }) as unknown as RequestContext;

  it('is an IPv6 client’s /64 by default, its own prefix length when told, and an IPv4 client’s address', () => {
    const cases: Array<[string, Record<string, string>, number | undefined, string]> = [
      ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', {}, undefined, '2001:db8:1:2::/64'],
      ['2001:db8:1:2::1', {}, undefined, '2001:db8:1:2::/64'],
      ['2001:DB8:1:2:0:0:0:FFFF', {}, undefined, '2001:db8:1:2::/64'],
      ['2001:db8:1:3::1', {}, undefined, '2001:db8:1:3::/64'],
      ['2001:db8:1:2ff::1', {}, 56, '2001:db8:1:200::/56'],
      ['2001:db8:1:2::1', {}, 128, '2001:db8:1:2::1'],
      ['::ffff:203.0.113.9', {}, undefined, '203.0.113.9'],
      ['203.0.113.9', {}, undefined, '203.0.113.9'],
      ['127.0.0.1', { 'x-forwarded-for': '2001:db8:9:9::77' }, undefined, '2001:db8:9:9::/64'],
      ['127.0.0.1', { 'x-forwarded-for': '::ffff:198.51.100.1' }, undefined, '198.51.100.1'],
      ['127.0.0.1', { forwarded: 'for="[2001:db8:9:9::78]:4711"' }, undefined, '2001:db8:9:9::/64'],
    ];
    for (let pass = 0; pass < 2; pass++)
      for (const [address, headers, prefix, key] of cases) {
        const ctx = ctxFor(address, headers);
        expect(requestIdentifier(ctx, loopback, prefix).ip, `${address} /${prefix}`).toBe(key);
        expect(clientKey(ctx, loopback, prefix)).toBe(key);
      }
  });

  it('leaves the full address to clientIp (logs, audit)', () => {
    const ctx = ctxFor('2001:db8:1:2::1');
    expect(clientIp(ctx, none)).toBe('2001:db8:1:2::1');
    expect(requestIdentifier(ctx, none).ip).toBe('2001:db8:1:2::/64');
  });

  it('stays right past the bound of remembered keys', () => {
    // From 0x100 on, no group of the prefix is zero: the key is the address's first four groups.
    for (let i = 0x100; i < 0x100 + 5000; i++) {
      const prefix = `2001:db8:${(i >> 8).toString(16)}:${(i & 255 || 0x1000).toString(16)}`;
      expect(clientKey(ctxFor(`${prefix}::1`), none)).toBe(`${prefix}::/64`);
    }
    expect(clientKey(ctxFor('2001:db8:1:2::5'), none, 128)).toBe('2001:db8:1:2::5');
  });
});
