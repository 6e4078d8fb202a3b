/**
 * A single gateway process (no ARKVORY_WORKERS) on the static-HTTP or the S3 store killed with
 * SIGKILL while an upload of it is staged whole and not yet moved to its blob name: the staged
 * upload stays on the store, and the next writer removes it before it serves (proxy/content/storage.ts
 * `gatewayStaging`). The upload is held between its staging and its commit by a lock on the catalog
 * table, released once the process is dead. The directory store's single process empties its tmp/
 * whole at open (storage-adapter/fs/fs-store.int.test.ts). The workers' side: proxy/workers/worker-staging*.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway } from '../../test/support/gateway.ts';
import { holdPublishes, STAGING_BACKINGS, type StagingBacking } from '../../test/support/staging.ts';

describe.each(Object.keys(STAGING_BACKINGS) as Array<keyof typeof STAGING_BACKINGS>)(
  'a single gateway process on the %s store killed with an upload staged',
  (kind) => {
    const db = useTestDatabase();
    let backing: StagingBacking;
    let key: string;

    beforeAll(async () => {
      backing = await STAGING_BACKINGS[kind]();
      await createRepository(db.pool, 'gs');
      ({ key } = await createServiceAccount(db.pool, { grants: { gs: 'write' } }));
    });
    afterAll(async () => {
      await backing?.stop();
    });

    it('leaves it on the store, and the next gateway removes it before it serves', async () => {
      const env = { ARKVORY_DATABASE_URL: db.url, ...backing.env };
      const killed = await startGateway({ env });
      const held = await holdPublishes(db.pool);
      try {
        const put = request(`${killed.url}/api/v1/repositories/gs/artifacts/doomed.bin`, {
          method: 'PUT',
          headers: bearer(key),
          body: randomContent(64 * 1024),
        });
        put.catch(() => undefined);
        await waitUntil(async () => (await backing.staged()).length === 1, {
          what: 'the staged upload',
          timeoutMs: 30_000,
          intervalMs: 20,
        });
        const staged = await backing.staged();

        expect(await killed.stop('SIGKILL')).not.toBe(0);
        await expect(put).rejects.toThrow();
        await held.release();
        expect(await backing.staged()).toEqual(staged);

        const next = await startGateway({ env });
        expect(await backing.staged()).toEqual([]);
        expect(await next.stop()).toBe(0);
      } finally {
        await held.release().catch(() => undefined);
        await killed.stop('SIGKILL');
      }
    });

    it('removes what workers of an earlier start left that no process of its start stages for (fewer workers now)', async () => {
      // An instance of four workers killed mid-upload, started again as one process: indexes 1..3
      // have no process any more to empty theirs when it opens the store.
      await backing.leave('gateway-worker-3', 'a');
      await backing.leave('gateway-worker-12', 'b');
      await backing.leave('worker', 'the-completion-workers');
      await backing.beginUpload?.('gateway-worker-2', 'c');
      const gateway = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url, ...backing.env } });
      try {
        // The separate completion worker's staging (tmp/worker/) is its own, and stays.
        expect(await backing.staged()).toEqual([expect.stringContaining('the-completion-workers')]);
        if (backing.openUploads) expect(await backing.openUploads()).toEqual([]);
      } finally {
        expect(await gateway.stop()).toBe(0);
      }
    });
  },
);
