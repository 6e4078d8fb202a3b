import { describe, expect, it } from 'vitest';
import { BACKUP_FORMAT, openManifest, sealManifest, type BackupManifest } from './manifest.ts';
import { tablesInDependencyOrder } from './table-order.ts';

const manifest: BackupManifest = {
  format: BACKUP_FORMAT,
  snapshotTime: '2026-12-01T12:00:00.000Z',
  completedAt: '2026-12-01T12:00:05.000Z',
  storageId: '6f1c1b1e-1111-4222-8333-944444444444',
  store: { kind: 'fs', location: '/srv/arkvory' },
  schemaVersion: 7,
  tables: [
    { name: 'arkvory_principals', rows: 2, restored: true },
    { name: 'arkvory_gateway_leases', rows: 1, restored: false },
  ],
  database: { file: 'database.jsonl', bytes: 1234, sha256: 'a'.repeat(64) },
  blobs: { count: 3, bytes: 300 },
  ruleDocuments: null,
};

describe('backup manifest', () => {
  it('round-trips through its sealed text', () => {
    const text = sealManifest(manifest);
    const opened = openManifest(text, 'm.json');
    expect(opened).toMatchObject(manifest);
    expect(opened.sha256).toMatch(/^[0-9a-f]{64}$/);
    // Sealing an opened manifest again gives the same text (the old seal is replaced, not nested).
    expect(sealManifest(opened)).toBe(text);
  });

  it('refuses a changed field, a cut text, another format and a missing field', () => {
    const text = sealManifest(manifest);
    expect(() => openManifest(text.replace('"rows": 2', '"rows": 3'), 'm.json')).toThrow(
      /does not match its own sha256/,
    );
    expect(() => openManifest(text.slice(0, text.length - 20), 'm.json')).toThrow(/is not JSON/);
    expect(() =>
      openManifest(sealManifest({ ...manifest, format: 'other/1' as typeof BACKUP_FORMAT }), 'm.json'),
    ).toThrow(/not an Arkvory backup manifest/);
    const { blobs: _blobs, ...withoutBlobs } = manifest;
    expect(() => openManifest(sealManifest(withoutBlobs as BackupManifest), 'm.json')).toThrow(
      /lacks a required field/,
    );
    // Resealed by whoever edited it: the storage id the restore would bind the target to must still be a UUID.
    for (const storageId of ['', '../../etc/x', 'restoring 6f1c1b1e-1111-4222-8333-944444444444'])
      expect(() => openManifest(sealManifest({ ...manifest, storageId }), 'm.json')).toThrow(/which is not a UUID/);
    let caught: unknown;
    try {
      openManifest('{}', 'm.json');
    } catch (err) {
      caught = err;
    }
    expect((caught as { code?: string } | undefined)?.code).toBe('backup_invalid');
  });

  it('refuses a resealed manifest that marks the migrations record, or a table kept for the record, as restored', () => {
    const withTable = (entry: BackupManifest['tables'][number]) =>
      sealManifest({ ...manifest, tables: [...manifest.tables, entry] });
    expect(() =>
      openManifest(withTable({ name: 'arkvory_schema_migrations', rows: 0, restored: true }), 'm.json'),
    ).toThrow(/m\.json lists table arkvory_schema_migrations as restored/);
    for (const name of ['arkvory_audit_events', 'arkvory_gateway_leases', 'arkvory_download_policy'])
      expect(() => openManifest(withTable({ name, rows: 1, restored: true }), 'm.json')).toThrow(
        new RegExp(`lists table ${name} as restored, which no backup does \\(it is kept for the record only\\)`),
      );
    // As a backup writes them: kept for the record, not restored.
    expect(
      openManifest(withTable({ name: 'arkvory_audit_events', rows: 1, restored: false }), 'm.json').tables,
    ).toHaveLength(3);
  });
});

describe('tablesInDependencyOrder', () => {
  it('puts every table after the tables it references, ties by name', () => {
    const order = tablesInDependencyOrder(
      [
        'arkvory_grants',
        'arkvory_artifacts',
        'arkvory_repositories',
        'arkvory_principals',
        'arkvory_auth_epoch',
        'arkvory_api_keys',
      ],
      [
        { child: 'arkvory_grants', parent: 'arkvory_principals' },
        { child: 'arkvory_grants', parent: 'arkvory_repositories' },
        { child: 'arkvory_api_keys', parent: 'arkvory_principals' },
        { child: 'arkvory_artifacts', parent: 'arkvory_repositories' },
      ],
    );
    expect(order).toEqual([
      'arkvory_auth_epoch',
      'arkvory_principals',
      'arkvory_api_keys',
      'arkvory_repositories',
      'arkvory_artifacts',
      'arkvory_grants',
    ]);
  });

  it('ignores self-references and still orders a cycle completely', () => {
    expect(tablesInDependencyOrder(['b', 'a'], [{ child: 'a', parent: 'a' }])).toEqual(['a', 'b']);
    expect(
      tablesInDependencyOrder(
        ['a', 'b', 'c'],
        [
          { child: 'a', parent: 'b' },
          { child: 'b', parent: 'a' },
          { child: 'c', parent: 'a' },
        ],
      ).sort(),
    ).toEqual(['a', 'b', 'c']);
  });
});
