import { describe, expect, it } from 'vitest';
import { formatS3Location, parseS3Url, pathStyleObjectPath } from './s3-location.ts';

describe('parseS3Url', () => {
  it.each([
    ['s3://artifacts', { bucket: 'artifacts', prefix: '' }],
    ['s3://artifacts/', { bucket: 'artifacts', prefix: '' }],
    ['s3://artifacts/arkvory', { bucket: 'artifacts', prefix: 'arkvory/' }],
    ['s3://my.bucket-1/a//b/', { bucket: 'my.bucket-1', prefix: 'a/b/' }],
  ])('%s', (url, value) => {
    expect(parseS3Url(url)).toEqual({ ok: true, value });
    expect(formatS3Location(value)).toBe(`s3://${value.bucket}/${value.prefix}`);
  });

  it.each([
    's3://',
    's3://ab',
    's3://Upper',
    's3://a..b',
    's3://bucket/x?y=1',
    's3://bucket/../x',
    'http://bucket/x',
    's3://-bucket',
  ])('refuses %s', (url) => {
    const parsed = parseS3Url(url);
    expect(parsed.ok).toBe(false);
  });

  it('encodes each key segment once, keeping the slashes', () => {
    expect(pathStyleObjectPath('b', 'uploads/x y/(1)')).toBe('/b/uploads/x%20y/%281%29');
  });
});
