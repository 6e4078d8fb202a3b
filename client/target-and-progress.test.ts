import { describe, expect, it } from 'vitest';
import { ArkvoryClientError } from './errors.ts';
import { etaSeconds, progressBar, progressJson } from './progress.ts';
import { baseUrlOf, contentUrl, targetOf } from './target.ts';

describe('targets', () => {
  it('maps short names to the v1 paths, encoding each segment', () => {
    expect(targetOf('libs', ['a b.bin']).contentPath).toBe('/api/v1/repositories/libs/artifacts/a%20b.bin/content');
    expect(targetOf('libs', ['pkg', '1.0']).basePath).toBe('/api/v1/repositories/libs/packages/pkg/1.0');
    expect(targetOf('libs', ['pkg', '1.0', 'x@y.tgz']).basePath).toBe(
      '/api/v1/repositories/libs/packages/pkg/1.0/assets/x%40y.tgz',
    );
    expect(contentUrl('libs/pkg/1.0', 'http://gw:8080/')).toBe(
      'http://gw:8080/api/v1/repositories/libs/packages/pkg/1.0/content',
    );
    expect(contentUrl('https://x/y/content?sig=1', undefined)).toBe('https://x/y/content?sig=1');
    expect(baseUrlOf('http://gw/api/v1/repositories/r/artifacts/a/content?X=1', undefined)).toBe(
      'http://gw/api/v1/repositories/r/artifacts/a',
    );
  });

  it('refuses names that are no target, with a code', () => {
    for (const bad of [
      () => targetOf('libs', []),
      () => targetOf('libs', ['a', 'b', 'c', 'd']),
      () => targetOf('', ['a']),
      () => targetOf('libs', ['..']),
      () => contentUrl('libs/a', undefined),
    ]) {
      expect(bad).toThrow(ArkvoryClientError);
    }
  });
});

describe('progress', () => {
  const p = {
    bytes: 5 * 1024 * 1024,
    total: 10 * 1024 * 1024,
    transferred: 4 * 1024 * 1024,
    elapsedMs: 2000,
    attempt: 2,
    url: 'http://gw/x/content?X-Arkvory-Signature=secret',
    done: false,
  };
  it('draws a bar with percentage, sizes, rate and ETA within the width', () => {
    const bar = progressBar(p, 90);
    expect(bar.length).toBeLessThanOrEqual(90);
    expect(bar).toContain(' 50% 5.0 MiB/10.0 MiB 2.0 MiB/s ETA 00:03');
    expect(etaSeconds(p)).toBe(3);
    expect(etaSeconds({ ...p, total: -1 })).toBeUndefined();
  });

  it('writes JSON lines without the query (a link signature is a credential)', () => {
    const line = JSON.parse(progressJson(p)) as Record<string, unknown>;
    expect(line).toEqual({
      event: 'progress',
      bytes: p.bytes,
      total: p.total,
      bytesPerSecond: 2 * 1024 * 1024,
      etaSeconds: 3,
      attempt: 2,
      url: 'http://gw/x/content',
    });
  });

  it('writes JSON lines without user info (a key given as https://ci:<key>@gw/…, which is never sent)', () => {
    const key = 'ark_bakpn10js1uf7lu3_Apzgec3B74bIkGyVImqmYdr8l_RGSVotdfkskeg_-1c';
    for (const url of [
      `https://ci:${key}@gw:8443/x/content`,
      `https://${key}@gw:8443/x/content?X-Arkvory-Signature=s`,
    ]) {
      const line = JSON.parse(progressJson({ ...p, url })) as Record<string, unknown>;
      expect(line.url).toBe('https://gw:8443/x/content');
    }
    // A password holding `?`: the query is not cut out of it before the user info is known.
    expect(progressJson({ ...p, url: 'https://ci:s3cr?et@gw/x/content' })).not.toContain('s3cr');
  });
});
