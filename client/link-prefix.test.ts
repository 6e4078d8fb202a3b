import { describe, expect, it } from 'vitest';
import { ArkvoryClientError } from './errors.ts';
import { linkUrl } from './link-prefix.ts';

const QUERY = '?X-Arkvory-Key=abcdefgh12345678&X-Arkvory-Signature=s';
const LINK = `/api/v1/repositories/libs/artifacts/app.tar.gz/content${QUERY}`;

describe('linkUrl', () => {
  it('puts the link on the origin asked, with no prefix when the gateway is at the root', () => {
    expect(linkUrl('https://gw.example:8443/api/v1/repositories/libs/artifacts/app.tar.gz/presign', LINK)).toBe(
      `https://gw.example:8443${LINK}`,
    );
  });

  it('keeps the path prefix the request had before the gateway path (a proxy strips it again)', () => {
    expect(linkUrl('https://host/prefix/api/v1/repositories/libs/artifacts/app.tar.gz/presign', LINK)).toBe(
      `https://host/prefix${LINK}`,
    );
    expect(linkUrl('https://host/a/b%20c/api/v1/repositories/libs/artifacts/app.tar.gz/presign', LINK)).toBe(
      `https://host/a/b%20c${LINK}`,
    );
  });

  it('matches names as the gateway does (decoded, NFC) and keeps the spelling the gateway signed', () => {
    const signed = `/api/v1/repositories/libs/packages/caf%C3%A9/1.0/assets/a%40b/content${QUERY}`;
    const asked = 'http://host/p/api/v1/repositories/libs/packages/cafe%CC%81/1.0/assets/a@b/presign';
    expect(linkUrl(asked, signed)).toBe(`http://host/p${signed}`);
  });

  it('refuses a link to another path than the one asked for: no prefix would reach it', () => {
    for (const [asked, link] of [
      ['http://host/gw/v1/repositories/libs/artifacts/app.tar.gz/presign', LINK],
      ['http://host/api/v1/repositories/libs/artifacts/other/presign', LINK],
      ['http://host/artifacts/app.tar.gz/presign', LINK],
      ['http://host/api/v1/repositories/libs/artifacts/app.tar.gz/presign', `/elsewhere${QUERY}`],
    ] as const) {
      const error = (() => {
        try {
          return linkUrl(asked, link);
        } catch (err) {
          return err;
        }
      })();
      expect(error, asked).toBeInstanceOf(ArkvoryClientError);
      expect((error as ArkvoryClientError).code).toBe('protocol');
    }
  });
});
