import { describe, expect, it } from 'vitest';
import { clientAddress, createTrustedProxies } from '../router/forwarded.ts';
import type { RequestContext } from '../server/route-types.ts';
import { clientIp } from './request-identity.ts';

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
