import { describe, expect, it } from 'vitest';
import { certificateExpired, certificateSans, normalizeSan } from './client-certificate.ts';

describe('normalizeSan', () => {
  it.each([
    ['URI:spiffe://example.org/ci', 'URI:spiffe://example.org/ci'],
    ['spiffe://example.org/ci', 'URI:spiffe://example.org/ci'],
    ['uri:spiffe://example.org/ci', 'URI:spiffe://example.org/ci'],
    ['DNS:Builder.Example.org', 'DNS:builder.example.org'],
    ['builder.example.org', 'DNS:builder.example.org'],
    // No normalisation beyond a DNS name's case: a trailing dot, a URI's case and its escapes are kept.
    ['DNS:ci.example.org.', 'DNS:ci.example.org.'],
    ['URI:SPIFFE://Example.org/c%69', 'URI:SPIFFE://Example.org/c%69'],
    ['  DNS:Builder.example.org  ', 'DNS:builder.example.org'],
    // A bare URI whose path holds `DNS:` is still a URI: only a leading kind names the kind.
    ['spiffe://example.org/DNS:x', 'URI:spiffe://example.org/DNS:x'],
    ['https://example.org/URI:x', 'URI:https://example.org/URI:x'],
  ])('%s → %s', (input, expected) => expect(normalizeSan(input)).toBe(expected));

  it.each([
    [''],
    ['DNS:bad name'],
    ['URI:has space'],
    ['DNS:'],
    [42],
    ['DNS:a\u0000b'],
    [`URI:${'x'.repeat(1100)}`],
    // A valid SAN at the end of a value that is not one is no SAN.
    ['URI:a URI:spiffe://example.org/admin'],
    ['DNS:a DNS:admin.example'],
  ])('refuses %j', (input) =>
    expect(() => normalizeSan(input)).toThrow(expect.objectContaining({ code: 'invalid_request' })),
  );

  it('says what a SAN must be, and names the refused one', () => {
    expect(() => normalizeSan('')).toThrow('san is required: URI:<uri> (e.g. a SPIFFE id) or DNS:<name>');
    expect(() => normalizeSan('DNS:bad name')).toThrow('san "DNS:bad name" is neither URI:<uri> nor DNS:<name>');
  });
});

describe('certificateSans', () => {
  it.each([
    [undefined, []],
    ['', []],
    ['URI:spiffe://example.org/ci', ['URI:spiffe://example.org/ci']],
    [
      'DNS:Builder.example.org, URI:spiffe://example.org/ci, IP Address:10.0.0.1, email:a@b.c',
      ['DNS:builder.example.org', 'URI:spiffe://example.org/ci'],
    ],
    ['URI:"spiffe://example.org/a,b", DNS:x.example', ['URI:spiffe://example.org/a,b', 'DNS:x.example']],
    ['DNS:bad name, DNS:ok.example', ['DNS:ok.example']],
    // A quoted value that is not a JSON string is skipped, not read raw.
    ['URI:"spiffe://example.org/\\x", DNS:ok.example', ['DNS:ok.example']],
    ['URI:"a" DNS:x, DNS:ok.example', ['DNS:ok.example']],
    // What Node prints for an otherName (a UPN) holding commas and a SAN's text: its commas escaped
    // in one quoted value, so no URI is read out of it.
    [
      String.raw`othername:"UPN:x\u002c URI:spiffe://example.org/b\u002c DNS:y", URI:spiffe://example.org/c`,
      ['URI:spiffe://example.org/c'],
    ],
    // Only a whole kind names the kind: one that merely ends in DNS or URI is another.
    ['Not DNS:evil.example, myURI:spiffe://example.org/admin', []],
    // A comma inside another kind's quoted value separates nothing: no URI is read out of it.
    ['email:"a, URI:spiffe://example.org/admin"', []],
    // Node writes `, ` between names; any blanks after the comma, none included, separate them.
    ['DNS:a.example,URI:spiffe://example.org/ci', ['DNS:a.example', 'URI:spiffe://example.org/ci']],
    ['DNS:a.example,  URI:spiffe://example.org/ci', ['DNS:a.example', 'URI:spiffe://example.org/ci']],
    // Exact, as bindings are (docs/tls.md): a trailing dot and a URI's case are kept.
    ['DNS:ci.example.org., URI:SPIFFE://Example.org/ci', ['DNS:ci.example.org.', 'URI:SPIFFE://Example.org/ci']],
  ])('%j → %j', (input, expected) => expect(certificateSans(input)).toEqual(expected));
});

describe('certificateExpired', () => {
  it.each([
    [1000, 999, undefined],
    [1000, 1000, 'the client certificate (or a CA certificate of its chain) expired at 1970-01-01T00:00:01.000Z'],
    [1000, 5000, 'the client certificate (or a CA certificate of its chain) expired at 1970-01-01T00:00:01.000Z'],
  ])('notAfter %d at %d', (notAfterMs, nowMs, expected) =>
    expect(certificateExpired({ notAfterMs }, nowMs)).toBe(expected),
  );
});
