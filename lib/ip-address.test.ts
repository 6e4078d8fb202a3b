import { describe, expect, it } from 'vitest';
import { addressKey, canonicalIp, formatIpv6, ipv6Groups } from './ip-address.ts';

describe('canonicalIp', () => {
  it.each([
    ['1.2.3.4', '1.2.3.4'],
    ['::ffff:1.2.3.4', '1.2.3.4'],
    ['::FFFF:1.2.3.4', '1.2.3.4'],
    ['::ffff:0102:0304', '1.2.3.4'],
    ['0:0:0:0:0:ffff:1.2.3.4', '1.2.3.4'],
    ['2001:DB8::1', '2001:db8::1'],
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'],
    ['0:0:0:0:0:0:0:1', '::1'],
    ['0::0', '::'],
    ['fe80::1%eth0', 'fe80::1'],
    ['::1.2.3.4', '::102:304'],
    [' 10.0.0.1 ', '10.0.0.1'],
  ])('%s → %s', (text, canonical) => {
    expect(canonicalIp(text)).toBe(canonical);
  });

  it.each(['', 'x', '1.2.3', '1.2.3.256', '01.2.3.4', '2001:db8::1::2', '1:2:3:4:5:6:7', '[::1]', '::1:80000'])(
    'refuses %j',
    (text) => {
      expect(canonicalIp(text)).toBeUndefined();
    },
  );

  it('round-trips every group layout through the formatter', () => {
    expect(ipv6Groups('1:2:3:4:5:6:7:8')).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(formatIpv6([1, 0, 0, 2, 0, 0, 0, 3])).toBe('1:0:0:2::3');
    expect(formatIpv6([1, 0, 0, 2, 0, 0, 3, 4])).toBe('1::2:0:0:3:4');
    expect(formatIpv6([1, 0, 2, 3, 4, 5, 6, 7])).toBe('1:0:2:3:4:5:6:7');
  });
});

describe('addressKey', () => {
  it('keys IPv4 by the address and IPv6 by its prefix, every spelling alike', () => {
    expect(addressKey('1.2.3.4', 64)).toBe('1.2.3.4');
    expect(addressKey('::ffff:1.2.3.4', 64)).toBe('1.2.3.4');
    expect(addressKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd', 64)).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:0DB8:0001:0002::7', 64)).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8:1:3::7', 64)).toBe('2001:db8:1:3::/64');
    expect(addressKey('2001:db8:1:2:aaaa::1', 56)).toBe('2001:db8:1::/56');
    expect(addressKey('2001:db8:1:2ff::1', 56)).toBe('2001:db8:1:200::/56');
    expect(addressKey('2001:db8:1:2::7', 128)).toBe('2001:db8:1:2::7');
    expect(addressKey('2001:db8:1:2::7', 0)).toBe('::/0');
    expect(addressKey('not an address', 64)).toBeUndefined();
  });

  it('keys an IPv4 client a NAT64/SIIT translator names (64:ff9b::/96) by its IPv4 address, not by the shared /64', () => {
    expect(addressKey('64:ff9b::198.51.100.7', 64)).toBe('198.51.100.7');
    expect(addressKey('64:ff9b::c633:6407', 64)).toBe('198.51.100.7');
    expect(addressKey('64:ff9b::c633:6408', 48)).toBe('198.51.100.8');
    expect(addressKey('64:ff9b::c633:6408', 128)).toBe('198.51.100.8');
    // Outside the /96 it is an IPv6 address like any other.
    expect(addressKey('64:ff9b:0:0:1::c633:6407', 64)).toBe('64:ff9b::/64');
    expect(addressKey('64:ff9b:1::c633:6407', 64)).toBe('64:ff9b:1::/64');
  });
});
