import { describe, expect, it } from 'vitest';
import { createTrustedProxies } from '../router/forwarded.ts';
import { BanIdentities, banIdentity } from './ban-identity.ts';

const loopback = createTrustedProxies(['127.0.0.1', '::1']);
const none = createTrustedProxies([]);

describe('banIdentity', () => {
  it('keys a direct client by its address, an IPv6 one by its /64, every spelling alike', () => {
    expect(banIdentity('203.0.113.9', {}, loopback, 64)).toStrictEqual({
      key: '203.0.113.9',
      untrustedForwarder: undefined,
      forwarderKey: undefined,
    });
    expect(banIdentity('::ffff:203.0.113.9', {}, loopback, 64).key).toBe('203.0.113.9');
    expect(banIdentity('2001:DB8:0:1::5', {}, loopback, 64).key).toBe('2001:db8:0:1::/64');
    // A trusted address without forwarding headers is a client itself.
    expect(banIdentity('127.0.0.1', {}, loopback, 64).key).toBe('127.0.0.1');
  });

  it('keys the IPv4 clients of a NAT64/SIIT translator (64:ff9b::/96) each by its own address, not by their shared /64', () => {
    expect(banIdentity('64:ff9b::203.0.113.9', {}, none, 64).key).toBe('203.0.113.9');
    expect(banIdentity('64:ff9b::cb00:710a', {}, none, 64).key).toBe('203.0.113.10');
    expect(banIdentity('127.0.0.1', { 'x-forwarded-for': '64:ff9b::198.51.100.1' }, loopback, 48).key).toBe(
      '198.51.100.1',
    );
  });

  it('keys the forwarded client behind a trusted proxy, and nobody when only proxies are named', () => {
    expect(banIdentity('127.0.0.1', { 'x-forwarded-for': '198.51.100.1' }, loopback, 64).key).toBe('198.51.100.1');
    expect(banIdentity('127.0.0.1', { 'x-forwarded-for': '2001:db8::1:2:3:4' }, loopback, 48).key).toBe(
      '2001:db8::/48',
    );
    expect(banIdentity('127.0.0.1', { 'x-forwarded-for': '::1' }, loopback, 64)).toEqual({
      key: undefined,
      untrustedForwarder: undefined,
    });
  });

  it('reads the client from Forwarded behind a trusted proxy that sends no X-Forwarded-For, never keying the proxy', () => {
    const proxy = createTrustedProxies(['127.0.0.2']);
    expect(banIdentity('127.0.0.2', { forwarded: 'for=198.51.100.7;proto=http' }, proxy, 64).key).toBe('198.51.100.7');
    expect(banIdentity('127.0.0.2', { forwarded: 'for="[2001:db8:1:2::9]:4711"' }, proxy, 64).key).toBe(
      '2001:db8:1:2::/64',
    );
    // A client's own node further left is skipped; a trusted hop is walked past.
    expect(banIdentity('127.0.0.1', { forwarded: 'for=6.6.6.6, for=198.51.100.7, for=::1' }, loopback, 64).key).toBe(
      '198.51.100.7',
    );
    // An obfuscated or unknown node stops the walk at the trusted proxy: nobody is counted.
    for (const forwarded of ['for=_hidden', 'for=unknown', 'proto=https', 'for=::1'])
      expect(banIdentity('127.0.0.1', { forwarded }, loopback, 64), forwarded).toEqual({
        key: undefined,
        untrustedForwarder: undefined,
      });
    // X-Forwarded-For wins when both are sent.
    expect(
      banIdentity('127.0.0.1', { 'x-forwarded-for': '198.51.100.8', forwarded: 'for=198.51.100.7' }, loopback, 64).key,
    ).toBe('198.51.100.8');
  });

  it('keys a client named by an untrusted forwarding peer together with that peer, charges the peer, and reports it', () => {
    expect(banIdentity('10.0.0.2', { 'x-forwarded-for': '6.6.6.6, 198.51.100.1' }, none, 64)).toEqual({
      key: 'by=10.0.0.2;for=198.51.100.1',
      untrustedForwarder: '10.0.0.2',
      forwarderKey: '10.0.0.2',
    });
    expect(banIdentity('10.0.0.2', { forwarded: 'for=1.1.1.1, for="[2001:db8::9]:80";proto=http' }, none, 64)).toEqual({
      key: 'by=10.0.0.2;for=2001:db8::/64',
      untrustedForwarder: '10.0.0.2',
      forwarderKey: '10.0.0.2',
    });
    // The peer's own key is the one it has as a direct client: an IPv6 peer's prefix.
    expect(banIdentity('2001:DB8:9::5', { 'x-forwarded-for': '198.51.100.1' }, loopback, 64)).toEqual({
      key: 'by=2001:db8:9::/64;for=198.51.100.1',
      untrustedForwarder: '2001:db8:9::5',
      forwarderKey: '2001:db8:9::/64',
    });
    // Naming no client, the peer is keyed (and charged) as itself, once.
    expect(banIdentity('10.0.0.2', { 'x-forwarded-for': 'garbage' }, none, 64)).toStrictEqual({
      key: '10.0.0.2',
      untrustedForwarder: '10.0.0.2',
      forwarderKey: undefined,
    });
  });

  it('answers the same through the per-peer memo, the first time, again, and past its bound', () => {
    const cases: Array<[string | undefined, Record<string, string>]> = [
      ['203.0.113.9', {}],
      ['::ffff:203.0.113.9', {}],
      ['2001:DB8:0:1::5', {}],
      ['127.0.0.1', {}],
      ['127.0.0.1', { 'x-forwarded-for': '198.51.100.1' }],
      ['127.0.0.1', { 'x-forwarded-for': '::1' }],
      ['127.0.0.1', { forwarded: 'for=198.51.100.7' }],
      ['127.0.0.1', { forwarded: 'for=_hidden' }],
      ['10.0.0.2', { 'x-forwarded-for': '6.6.6.6, 198.51.100.1' }],
      ['10.0.0.2', { forwarded: 'for=1.1.1.1, for="[2001:db8::9]:80";proto=http' }],
      ['10.0.0.2', { 'x-forwarded-for': 'garbage' }],
      ['10.0.0.2', {}],
      [undefined, {}],
    ];
    for (const trusted of [loopback, none]) {
      const identities = new BanIdentities(trusted, 48);
      for (let pass = 0; pass < 2; pass++)
        for (const [address, headers] of cases)
          expect(identities.of(address, headers)).toEqual(banIdentity(address, headers, trusted, 48));
      for (let i = 0; i < 1100; i++) identities.of(`198.18.${i >> 8}.${i & 255}`, {});
      for (const [address, headers] of cases)
        expect(identities.of(address, headers)).toEqual(banIdentity(address, headers, trusted, 48));
    }
  });
});
