/**
 * `arkvory restore` (a real process, real PostgreSQL, the static-HTTP store on nginx) whose closing
 * scrub cannot judge a blob: a second nginx in front of the store cuts a marker out of every blob it
 * answers (a clean, short answer), so each read of that blob ends early, twice. The restore is
 * complete, yet not every blob was judged: exit 4 with one line, as `arkvory scrub` itself exits.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { expect, it, onTestFinished } from 'vitest';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { publishArtifact } from '../../storage-adapter/catalog/publish.ts';
import { runBackup } from '../../storage-adapter/backup/backup.ts';
import { openFsStore } from '../../storage-adapter/fs/index.ts';
import { createRepository } from '../../test/support/auth.ts';
import { createTestDatabase, useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli } from '../../test/support/gateway.ts';
import { startRewritingFront, startStaticStore } from '../../test/support/static-store.ts';

const source = useTestDatabase();
const CUT = 'ARKVORY-CUT-SHORT-MARKER';

it('exits 4 with one line when its scrub leaves a blob unjudged, and its audit entry counts it; the restore itself is complete', async () => {
  await createRepository(source.pool, 'cut');
  const store = await openFsStore({
    root: await makeTempDir('arkvory-cut-source-'),
    role: 'writer',
    pool: source.pool,
  });
  const bodies = [Buffer.concat([randomBytes(20_000), Buffer.from(CUT), randomBytes(20_000)]), randomBytes(30_000)];
  try {
    for (const [i, body] of bodies.entries())
      await publishArtifact(
        { store, catalog: createCatalog(source.pool) },
        {
          key: { repository: 'cut', kind: 'artifact', name: `c${i}`, version: '', asset: '' },
          body: Readable.from([body]),
          contentType: 'a/b',
          publishedBy: null,
          stage: { maxBytes: 1e6 },
        },
      );
  } finally {
    await store.close();
  }
  const { backup } = await runBackup({
    destination: await makeTempDir('arkvory-cut-backups-'),
    pool: source.pool,
    store,
    nowMs: Date.now,
  });

  const nginx = await startStaticStore();
  onTestFinished(() => nginx.stop());
  const front = await startRewritingFront(nginx, 'blobs/', [[CUT, '']]);
  onTestFinished(() => front.stop());

  const target = await createTestDatabase({ migrated: false });
  onTestFinished(() => target.drop());
  const restored = await runCli(['restore', backup], {
    ARKVORY_DATABASE_URL: target.url,
    ARKVORY_STORAGE_URL: front.url,
    ARKVORY_DATA_DIR: await makeTempDir('arkvory-cut-data-'),
  });
  const cutSha = createHash('sha256').update(bodies[0]!).digest('hex');
  expect(restored.code, restored.stderr).toBe(4);
  // Besides the progress lines (JSON, stderr is no terminal here), one line saying what to do.
  const lines = restored.stderr
    .trim()
    .split('\n')
    .filter((l) => !l.startsWith('{'));
  expect(lines).toEqual([
    'arkvory restore: restored, but its scrub left 1 blob(s) unjudged (listed under "scrub" on stdout, nothing moved): run arkvory scrub',
  ]);
  const summary = JSON.parse(restored.stdout) as {
    blobs: { count: number };
    scrub: { corrupt: unknown[]; missing: unknown[]; unjudged: Array<{ blob: string; code: string }> };
  };
  expect(summary.blobs.count).toBe(2);
  expect(summary.scrub).toMatchObject({
    corrupt: [],
    missing: [],
    unjudged: [{ blob: cutSha, code: 'read_incomplete' }],
  });
  // Complete: the store holds both blobs whole and the database is bound to it.
  expect((await target.pool.query('SELECT 1 FROM arkvory_storage')).rowCount).toBe(1);
  // Its audit entry says so too, as it says the damage of a restore whose scrub found some.
  const audit = await target.pool.query<{ details: Record<string, unknown> }>(
    "SELECT details FROM arkvory_audit_events WHERE action = 'backup.restore'",
  );
  expect(audit.rows).toEqual([{ details: expect.objectContaining({ corrupt: 0, missing: 0, unjudged: 1 }) }]);
}, 60_000);
