import { describe, expect, it } from 'vitest';
import { isRestoreMarker, replacementToken, restoreMarker, restoreMarkOwner } from './identity.ts';

const id = '6f1c1b1e-1111-4222-8333-944444444444';

describe('a restore mark', () => {
  it('names the process writing it, read back as written (a host with dots too)', () => {
    const mark = restoreMarker(id, { host: 'db1.example.org', pid: 4711 });
    expect(mark).toBe(`restoring ${id} db1.example.org 4711`);
    expect(isRestoreMarker(`${mark}\n`)).toBe(true);
    expect(restoreMarkOwner(`${mark}\n`)).toEqual({ host: 'db1.example.org', pid: 4711 });
  });

  it('names its run too, so two runs of one pid (a container) leave different marks and take different tokens', () => {
    const run = '0b6f6f1e-3c1a-4d2e-9f00-5a1b2c3d4e5f';
    const mark = restoreMarker(id, { host: 'pod-1', pid: 1, run });
    expect(mark).toBe(`restoring ${id} pod-1 1 ${run}`);
    expect(restoreMarkOwner(`${mark}\n`)).toEqual({ host: 'pod-1', pid: 1, run });
    const other = restoreMarker(id, { host: 'pod-1', pid: 1, run: run.replace('0b', '0c') });
    expect(replacementToken(mark)).not.toBe(replacementToken(other));
    expect(replacementToken(`${mark}\n`)).toBe(replacementToken(mark));
    expect(replacementToken(undefined)).not.toBe(replacementToken(''));
    expect(replacementToken(mark)).toMatch(/^storage-id\.replacing\.[0-9a-f]{32}$/);
  });

  it('written before marks named their process has no owner (taken as a stopped restore’s)', () => {
    expect(isRestoreMarker(`restoring ${id}\n`)).toBe(true);
    expect(restoreMarkOwner(`restoring ${id}\n`)).toBeUndefined();
    expect(restoreMarkOwner(id)).toBeUndefined();
    expect(restoreMarkOwner(undefined)).toBeUndefined();
  });
});
