import { describe, expect, it } from 'vitest';
import { RouteTable } from './route-table.ts';

describe('RouteTable', () => {
  const table = new RouteTable<string>()
    .add({ methods: ['GET', 'HEAD'], template: '/api/v1/repositories/:repo/artifacts/:id/content', value: 'content' })
    .add({ methods: ['PUT', 'DELETE'], template: '/api/v1/repositories/:repo/artifacts/:id', value: 'artifact' })
    .add({ methods: ['GET'], template: '/health/live', value: 'live' });

  it('matches templates and decodes parameters', () => {
    const m = table.match('GET', '/api/v1/repositories/lib%20s/artifacts/a.tar.gz/content');
    expect(m).toEqual({
      kind: 'found',
      route: expect.objectContaining({ value: 'content' }),
      params: { repo: 'lib s', id: 'a.tar.gz' },
    });
  });

  it('answers method_not_allowed with the allowed methods', () => {
    expect(table.match('POST', '/api/v1/repositories/r/artifacts/a')).toEqual({
      kind: 'method_not_allowed',
      template: '/api/v1/repositories/:repo/artifacts/:id',
      allow: ['PUT', 'DELETE'],
    });
  });

  it.each([
    '/api/v1/repositories/%2e%2e/artifacts/a/content',
    '/api/v1/repositories/r/artifacts/a%2Fb/content',
    '/api/v1/repositories/r/artifacts/%00/content',
    '/api/v1/repositories/r/artifacts/%E0%A4%A/content',
    '/api/v1/repositories//artifacts/a/content',
    '/health/live/',
    '/nope',
  ])('does not match %s', (p) => {
    expect(table.match('GET', p).kind).toBe('not_found');
  });

  it('refuses the same method and template twice', () => {
    expect(() => table.add({ methods: ['GET'], template: '/health/live', value: 'again' })).toThrow(/registered twice/);
  });
});
