import { expect, it } from 'vitest';
import { spanPath } from './span-path.ts';

it.each([
  ['/api/v1/repositories/r/artifacts/a.bin/content', '/api/v1/repositories/r/artifacts/a.bin/content'],
  ['/api/v1/x/content?x-sig=s3cret', '/api/v1/x/content'],
  ['/npm/@scope/pkg', '/npm/@scope/pkg'],
  ['/a/%2e%2e/b', '/b'],
  ['/a/b?', '/a/b'],
  ['http://alice:S3cretPassw0rd@gw:8080/api/v1/x/content?sig=q', '/api/v1/x/content'],
  ['https://alice@gw/p', '/p'],
  ['//alice:S3cretPassw0rd@gw/p', '/p'],
  ['/\\alice:S3cretPassw0rd@gw/p', '/p'],
  ['http://alice:@gw/S3cret@host/p', '/<redacted>'],
  ['http://gw', '/'],
  ['*', '*'],
])('%j is recorded as %j', (target, path) => {
  expect(spanPath(target)).toBe(path);
});

it('records a key in the path (pasted where its id belongs) without its secret', () => {
  const secret = 'Apzgec3B74bIkGyVImqmYdr8l_RGSVotdfkskeg_-1c';
  expect(spanPath(`/api/v1/admin/keys/ark_bakpn10js1uf7lu3_${secret}/revoke`)).toBe(
    '/api/v1/admin/keys/ark_bakpn10js1uf7lu3_<redacted>/revoke',
  );
  expect(spanPath(`/a/%2e%2e/keys/ark_bakpn10js1uf7lu3_${secret}`)).toBe('/keys/ark_bakpn10js1uf7lu3_<redacted>');
  expect(spanPath(`/api/v1/admin/principals/ark_bakpn10js1uf7lu3_${secret.slice(0, -1)}/disable`)).toBe(
    '/api/v1/admin/principals/ark_bakpn10js1uf7lu3_<redacted>/disable',
  );
  expect(spanPath(`/api/v1/admin/principals/ark_bakpn10js1uf7lu3_${secret}%20/disable`)).toBe(
    '/api/v1/admin/principals/ark_bakpn10js1uf7lu3_<redacted>%20/disable',
  );
  expect(spanPath('/api/v1/repositories/r/artifacts/ark_notakey/content')).toBe(
    '/api/v1/repositories/r/artifacts/ark_notakey/content',
  );
});

it('records no path for a target that is no URL', () => {
  expect(spanPath('http://alice:pw@[::1')).toBeUndefined();
  expect(spanPath('http://alice:S3cret/x@gw/p')).toBeUndefined();
});
