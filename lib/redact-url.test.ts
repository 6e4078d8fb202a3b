import { describe, expect, it } from 'vitest';
import { redactQuotedUrls, redactUrl, redactUrlList } from './redact-url.ts';

const SECRET = 's3cret';

describe('redactUrl', () => {
  it.each([
    ['http://svc:s3cret@rules:9000/x', 'http://<redacted>@rules:9000/x'],
    // A password holding `@`: the parser takes the last one before the host.
    ['http://svc:s3cret@x@rules:9/', 'http://<redacted>@rules:9/'],
    ['redis://:s3cret@redis:6379/0', 'redis://<redacted>@redis:6379/0'],
    ['http://svc@rules/', 'http://<redacted>@rules/'],
    // Forms without `//` that the parser (and so every client) still reads as credentials.
    ['http:svc:s3cret@rules:9000/', 'http://<redacted>@rules:9000/'],
    ['http:\\\\svc:s3cret@rules:9000/', 'http://<redacted>@rules:9000/'],
    ['http:/\\svc:s3cret@rules:9000/', 'http://<redacted>@rules:9000/'],
    ['HTTP://svc:s3cret@Rules/', 'http://<redacted>@rules/'],
    // Query strings carry secrets too (pg and ioredis read `password=`; signed URLs).
    ['postgres://arkvory@127.0.0.1:1/arkvory?password=s3cret', 'postgres://<redacted>@127.0.0.1:1/arkvory?<redacted>'],
    ['redis://127.0.0.1:1/0?password=s3cret', 'redis://127.0.0.1:1/0?<redacted>'],
    ['http://store:8081/a/?X-Amz-Signature=s3cret&token=s3cret', 'http://store:8081/a/?<redacted>'],
    ['s3://bucket/p/?X-Amz-Signature=s3cret', 's3://bucket/p/?<redacted>'],
    ['https://h/v1/traces#access_token=s3cret', 'https://h/v1/traces#<redacted>'],
    // A password holding `/` or `:` makes the parser see a host and a path: the path goes.
    ['http://svc:12/s3cret@rules:9000/', 'http://svc:12/<redacted>'],
    ['http://svc://s3cret@rules/', 'http://svc/<redacted>'],
    // Whitespace, quotes and non-ASCII spaces inside user info.
    ['http://svc:pa s3cret@rules/', 'http://<redacted>@rules/'],
    ['http://svc:pa\ts3cret@rules/', 'http://<redacted>@rules/'],
    ['http://svc:pa\u00a0s3cret@rules/', 'http://<redacted>@rules/'],
    ['http://svc:pa\u3000s3cret@rules/', 'http://<redacted>@rules/'],
    ['http://svc:pa"s3cret@rules/', 'http://<redacted>@rules/'],
    // An opaque path that could be user info.
    ['redis:svc:s3cret@redis', 'redis:<redacted>'],
    ['svc:s3cret@rules:9000', 'svc:<redacted>'],
    ['svc:s3cret@', 'svc:<redacted>'],
    // Nothing secret: shown as given (normalised).
    ['https://collector:4318/v1/traces', 'https://collector:4318/v1/traces'],
    ['http://[::1]:9/', 'http://[::1]:9/'],
    ['file:///var/lib/arkvory', 'file:///var/lib/arkvory'],
    ['localhost:9000', 'localhost:9000'],
  ])('%j → %s', (raw, expected) => {
    expect(redactUrl(raw)).toBe(expected);
    expect(redactUrl(raw)).not.toContain(SECRET);
  });

  it.each([
    // A raw `/`, `?` or `#` in a password, `//` in it, whitespace where the parser refuses it.
    'http://svc:pa/s3cret@rules:9000/',
    'http://svc:pa?s3cret@rules:9000/',
    'http://svc:pa#s3cret@rules:9000/',
    'http://svc:pa//s3cret@rules:9000/',
    'http//svc:s3cret@redis',
    'http://svc:s3cret',
    'http://exa mple/?s3cret',
    'not a url s3cret',
    '"s3cret"',
  ])('does not parse and could hold a secret: %j is not shown', (raw) => {
    expect(redactUrl(raw)).toBe('<unparseable URL>');
  });

  it('shows text that does not parse but cannot hold a secret, so a typo can be fixed', () => {
    expect(redactUrl('localhost')).toBe('localhost');
    expect(redactUrl('http://')).toBe('http://');
    expect(redactUrl('10.0.0.20:8081')).toBe('10.0.0.20:8081');
    expect(redactUrl('https://a, https://b')).toBe('https://a, https://b');
    expect(redactUrl('http://svc:pa/s3cret,x@h')).toBe('<unparseable URL>,<unparseable URL>');
  });

  it('reads the whole value: a secret past any length is not cut in half', () => {
    const password = `${'p'.repeat(250)}${SECRET}`;
    expect(redactUrl(`http://svc:${password}@rules:9000/`)).toBe('http://<redacted>@rules:9000/');
    expect(redactUrl(`http://rules:9000/?token=${password}`)).toBe('http://rules:9000/?<redacted>');
  });
});

describe('redactUrlList', () => {
  it('redacts every entry and keeps the commas and spaces between them', () => {
    expect(redactUrlList('redis://:s3cret@a:1, redis://:s3cret@b:2')).toBe(
      'redis://<redacted>@a:1, redis://<redacted>@b:2',
    );
    // A comma inside a password cuts it into entries that do not parse: neither half is shown.
    expect(redactUrlList('redis://:pa,s3cret@a:1')).toBe('<unparseable URL>,<unparseable URL>');
  });
});

describe('redactQuotedUrls', () => {
  const values = ['http://svc:s3cret@rules/x?token=s3cret', 'http://a:1, http:svc:s3cret@b:2', 'ftp://ok/'];

  it('replaces the values a line quotes, whole or one entry, raw or JSON-escaped', () => {
    const line = (quoted: string) => redactQuotedUrls(`X: bad, got ${quoted}`, values);
    expect(line('"http://svc:s3cret@rules/x?token=s3cret"')).toBe('X: bad, got "http://<redacted>@rules/x?<redacted>"');
    expect(line('"http:svc:s3cret@b:2"')).toBe('X: bad, got "http://<redacted>@b:2/"');
    expect(line('" http:svc:s3cret@b:2"')).toBe('X: bad, got " http://<redacted>@b:2/"');
    expect(line(JSON.stringify('http://a:1, http:svc:s3cret@b:2'))).toBe(
      'X: bad, got "http://a:1, http://<redacted>@b:2/"',
    );
    expect(line('"ftp://ok/"')).toBe('X: bad, got "ftp://ok/"');
    expect(line('"http://a:1"')).toBe('X: bad, got "http://a:1"');
  });

  it('leaves a line alone that quotes nothing secret', () => {
    expect(redactQuotedUrls('X: got "http://a:1" and "localhost"', ['http://a:1', 'localhost'])).toBe(
      'X: got "http://a:1" and "localhost"',
    );
  });

  it('handles JSON escapes inside a value', () => {
    const value = 'http://svc:pa"s3cret@rules/';
    expect(redactQuotedUrls(`X: got ${JSON.stringify(value)}`, [value])).toBe('X: got "http://<redacted>@rules/"');
  });
});
