import { describe, expect, it } from 'vitest';
import { KeyScope, normalizedOrigin, pathOnOrigin } from './credential-scope.ts';

describe('normalizedOrigin', () => {
  it('lowercases scheme and host and always writes the effective port', () => {
    expect(normalizedOrigin('HTTP://GW.Example:8080/api/x?y=1')).toBe('http://gw.example:8080');
    expect(normalizedOrigin('http://gw')).toBe('http://gw:80');
    expect(normalizedOrigin('http://gw:80/x')).toBe('http://gw:80');
    expect(normalizedOrigin('https://gw/x')).toBe('https://gw:443');
    expect(normalizedOrigin('https://gw:443')).toBe('https://gw:443');
    expect(normalizedOrigin('http://[::1]:9000/x')).toBe('http://[::1]:9000');
    expect(normalizedOrigin('http://user:pw@gw:81/x')).toBe('http://gw:81');
  });

  it('is undefined for anything but an http(s) URL', () => {
    for (const text of ['gw:8080', 'libs/app.bin', 'ftp://gw/x', 'file:///etc/passwd', '', 'http://'])
      expect(normalizedOrigin(text)).toBeUndefined();
  });
});

describe('KeyScope', () => {
  const scope = new KeyScope(['http://GW:8080/', 'https://reader-2', undefined, 'not a url']);

  it('allows the named origins, however their URLs are spelled', () => {
    expect(scope.allows('http://gw:8080/api/v1/repositories/r/artifacts/a/content')).toBe(true);
    expect(scope.allows('HTTP://Gw:8080/x')).toBe(true);
    expect(scope.allows('https://reader-2:443/x')).toBe(true);
    expect(scope.allows('https://READER-2/x')).toBe(true);
  });

  it('refuses every other scheme, host or port, and what is not a URL', () => {
    for (const url of [
      'http://gw:8081/x', // another port
      'http://gw/x', // port 80, not 8080
      'https://gw:8080/x', // another scheme
      'http://reader-2/x', // http, not https
      'http://gw.:8080/x', // a trailing dot is another host
      'http://gw:8080.evil.example/x',
      'http://gw:8080@evil.example/x', // userinfo: the host is evil.example
      'http://evil.example/http://gw:8080/',
      'not a url',
    ])
      expect(scope.allows(url), url).toBe(false);
  });

  it('allows nothing when no gateway is named', () => {
    expect(new KeyScope([]).allows('http://gw:8080/x')).toBe(false);
    expect(new KeyScope([undefined]).allows('http://gw:8080/x')).toBe(false);
  });
});

describe('pathOnOrigin: a path the gateway answered, joined to its origin', () => {
  it('joins an absolute path', () => {
    expect(pathOnOrigin('http://gw:8080', '/api/v1/uploads/u1')).toBe('http://gw:8080/api/v1/uploads/u1');
  });

  it('refuses what would lead off the origin, or is no path', () => {
    // `http://gw:8080@evil/x` names the host evil, gw:8080 its user info: the key would go there.
    for (const path of ['@evil/x', ':1@evil/x', 'evil/x', '', undefined, 42, { url: '/x' }])
      expect(pathOnOrigin('http://gw:8080', path)).toBeUndefined();
  });
});
