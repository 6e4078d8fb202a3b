import { describe, expect, it } from 'vitest';
import { createTrustedProxies } from '../router/forwarded.ts';
import { banIdentity } from './ban-identity.ts';

const loopback = createTrustedProxies(['127.0.0.1', '::1']);
const none = createTrustedProxies([]);

describe('banIdentity', () => {
  it('keys a direct client by its address, an IPv6 one by its /64, every spelling alike', () => {
    expect(banIdentity('203.0.113.9', {}, loopback, 64)).toEqual({ key: '203.0.113.9', untrustedForwarder: undefined });
    expect(banIdentity('::ffff:203.0.113.9', {}, loopback, 64).key).toBe('203.0.113.9');
    expect(banIdentity('2001:DB8:0:1::5', {}, loopback, 64).key).toBe('2001:db8:0:1::/64');
    // A trusted address without forwarding headers is a client itself.
    expect(banIdentity('127.0.0.1', {}, loopback, 64).key).toBe('127.0.0.1');
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

  it('keys a client named by an untrusted forwarding peer together with that peer, and reports the peer', () => {
    expect(banIdentity('10.0.0.2', { 'x-forwarded-for': '6.6.6.6, 198.51.100.1' }, none, 64)).toEqual({
      key: 'by=10.0.0.2;for=198.51.100.1',
      untrustedForwarder: '10.0.0.2',
    });
    expect(banIdentity('10.0.0.2', { forwarded: 'for=1.1.1.1, for="[2001:db8::9]:80";proto=http' }, none, 64)).toEqual({
      key: 'by=10.0.0.2;for=2001:db8::/64',
      untrustedForwarder: '10.0.0.2',
    });
    expect(banIdentity('10.0.0.2', { 'x-forwarded-for': 'garbage' }, none, 64)).toEqual({
      key: '10.0.0.2',
      untrustedForwarder: '10.0.0.2',
    });
  });
});
