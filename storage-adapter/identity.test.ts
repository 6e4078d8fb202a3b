import { describe, expect, it } from 'vitest';
import { isRestoreMarker, restoreMarker, restoreMarkOwner } from './identity.ts';

const id = '6f1c1b1e-1111-4222-8333-944444444444';

describe('a restore mark', () => {
  it('names the process writing it, read back as written (a host with dots too)', () => {
    const mark = restoreMarker(id, { host: 'db1.example.org', pid: 4711 });
    expect(mark).toBe(`restoring ${id} db1.example.org 4711`);
    expect(isRestoreMarker(`${mark}\n`)).toBe(true);
    expect(restoreMarkOwner(`${mark}\n`)).toEqual({ host: 'db1.example.org', pid: 4711 });
  });

  it('written before marks named their process has no owner (taken as a stopped restore’s)', () => {
    expect(isRestoreMarker(`restoring ${id}\n`)).toBe(true);
    expect(restoreMarkOwner(`restoring ${id}\n`)).toBeUndefined();
    expect(restoreMarkOwner(id)).toBeUndefined();
    expect(restoreMarkOwner(undefined)).toBeUndefined();
  });
});
