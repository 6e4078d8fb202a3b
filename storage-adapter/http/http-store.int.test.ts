/**
 * What only the static-HTTP store does: its refusals name ARKVORY_STORAGE_URL, and a store that is
 * down (nginx stopped) refuses with `upstream_unreachable`. Everything every store must do, this one
 * included, is the conformance suite (test/conformance/artifact-store.ts).
 */
import { readdir } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { startStaticStore } from '../../test/support/static-store.ts';
import { openHttpStore } from './http-store.ts';

describe('static-HTTP store (nginx)', () => {
  const db = useTestDatabase();

  it('refusals name ARKVORY_STORAGE_URL; a store that is down refuses as unreachable', async () => {
    const nginx = await startStaticStore();
    try {
      await db.pool.query('DELETE FROM arkvory_storage');
      const open = (role: 'writer' | 'reader', url = nginx.url) =>
        openHttpStore({ url, role, pool: db.pool, connectTimeoutMs: 1000, timeoutMs: 5000 });
      const writer = await open('writer');
      expect(writer.identity.variable).toBe('ARKVORY_STORAGE_URL');
      await writer.close();
      // Another, empty store on the same database: refused, naming the variable to fix.
      await expect(open('writer', `${nginx.url}other/`)).rejects.toMatchObject({
        code: 'storage_mismatch',
        message: expect.stringContaining('ARKVORY_STORAGE_URL'),
      });
      expect(await readdir(nginx.root)).toEqual(['storage-id']);

      await nginx.stop();
      await expect(open('reader')).rejects.toMatchObject({ code: 'upstream_unreachable' });
    } finally {
      await nginx.stop();
    }
  });
});
