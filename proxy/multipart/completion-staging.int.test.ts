/**
 * A separate completion worker (ARKVORY_ROLE=worker) on the static-HTTP or the S3 store killed with
 * SIGKILL while a multipart session's whole is staged and not yet moved to its blob name: the next
 * worker to take the worker lock removes it (its tmp/worker/) before it claims a job, as on the
 * directory store (storage-adapter/fs/fs-store.int.test.ts). The assembly is held between its staging
 * and its commit by a lock on the catalog table. The gateways' side: gateway-staging.int.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type GatewayProcess, startGateway } from '../../test/support/gateway.ts';
import { openUploadWithParts } from '../../test/support/multipart-upload.ts';
import { holdPublishes, STAGING_BACKINGS, type StagingBacking } from '../../test/support/staging.ts';

const active = (worker: GatewayProcess) => worker.logLines().some((l) => l.event === 'worker.active');

describe.each(Object.keys(STAGING_BACKINGS) as Array<keyof typeof STAGING_BACKINGS>)(
  'a separate completion worker on the %s store killed with an assembly staged',
  (kind) => {
    const db = useTestDatabase();
    let backing: StagingBacking;
    let key: string;

    beforeAll(async () => {
      backing = await STAGING_BACKINGS[kind]();
      await createRepository(db.pool, 'cs');
      ({ key } = await createServiceAccount(db.pool, { grants: { cs: 'write' } }));
    });
    afterAll(async () => {
      await backing?.stop();
    });

    it('leaves it on the store, and the next worker removes it when it takes the worker lock', async () => {
      const env = { ARKVORY_DATABASE_URL: db.url, ...backing.env };
      const writer = await startGateway({ env: { ...env, ARKVORY_EMBEDDED_WORKER: '0' } });
      const killed = await startGateway({ env: { ...env, ARKVORY_ROLE: 'worker' }, waitFor: 'listening' });
      await waitUntil(() => active(killed), { what: 'the first worker active', timeoutMs: 30_000 });
      const repo = `${writer.url}/api/v1/repositories/cs`;
      const parts = [randomContent(64 * 1024), randomContent(1024)];
      const upload = await openUploadWithParts(repo, 'assembled.bin', key, parts);
      const held = await holdPublishes(db.pool);
      try {
        const done = await request(`${repo}/uploads/${upload}/complete`, {
          method: 'POST',
          headers: { ...bearer(key), 'content-type': 'application/json' },
          body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
        });
        expect(done.status, done.body.toString()).toBe(202);
        await waitUntil(async () => (await backing.staged()).length === 1, {
          what: 'the staged assembly',
          timeoutMs: 30_000,
          intervalMs: 20,
        });
        const staged = await backing.staged();

        expect(await killed.stop('SIGKILL')).not.toBe(0);
        expect(await backing.staged()).toEqual(staged);

        // Its job is queued again and assembled anew once its retry delay passed: held again here.
        const next = await startGateway({ env: { ...env, ARKVORY_ROLE: 'worker' }, waitFor: 'listening' });
        await waitUntil(() => active(next), { what: 'the next worker active', timeoutMs: 30_000 });
        expect(await backing.staged()).not.toContain(staged[0]);
        await held.release();
        expect(await next.stop()).toBe(0);
        expect(await writer.stop()).toBe(0);
      } finally {
        await held.release().catch(() => undefined);
        await killed.stop('SIGKILL');
      }
    });
  },
);
