/**
 * A name deleted and published again gets a created_at (Last-Modified) in a later second than every
 * earlier version's (migrations/0075), on real PostgreSQL. Earlier versions are dated ahead of the
 * clock, so each case stands for "published within the current second" without racing the clock.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { createRepository } from '../../test/support/auth.ts';
import { waitUntil } from '../../test/harness/index.ts';
import { createCatalog, type ArtifactKey, type NewCatalogEntry } from './catalog.ts';
import { artifactEntry } from '../../test/support/catalog-entries.ts';

const db = useTestDatabase();
const SECOND = 1000;

function entry(name: string, digit: string, repository = 'times'): NewCatalogEntry {
  return artifactEntry(repository, name, digit);
}

/** Publishes `name` and dates its row `aheadSeconds` past the database's current second. */
async function publishAhead(key: NewCatalogEntry, aheadSeconds: number): Promise<number> {
  const catalog = createCatalog(db.pool);
  expect((await catalog.insertOrGet(key)).inserted).toBe(true);
  const { rows } = await db.pool.query<{ created_at: Date }>(
    `UPDATE arkvory_artifacts SET created_at = date_trunc('second', now()) + make_interval(secs => $6)
     WHERE repository = $1 AND kind = $2 AND name = $3 AND version = $4 AND asset = $5 RETURNING created_at`,
    [key.repository, key.kind, key.name, key.version, key.asset, aheadSeconds],
  );
  return rows[0]!.created_at.getTime();
}

const tombstones = async (key: ArtifactKey) =>
  (
    await db.pool.query<{ created_at: Date }>(
      'SELECT created_at FROM arkvory_artifact_tombstones WHERE repository = $1 AND name = $2',
      [key.repository, key.name],
    )
  ).rows.map((r) => r.created_at.getTime());

describe('publish times of a name published again', () => {
  beforeAll(async () => {
    await createRepository(db.pool, 'times');
  });

  it('follow the deleted version by a second, version after version', async () => {
    const catalog = createCatalog(db.pool);
    const first = await publishAhead(entry('again', 'a'), 5);
    expect(await catalog.remove(entry('again', 'a'))).toBe(true);
    const second = (await catalog.insertOrGet(entry('again', 'b'))).entry.createdAtMs;
    expect(second).toBe(first + SECOND);
    // Deleted again within that second: the third version is a second later still.
    expect(await catalog.remove(entry('again', 'b'), () => {})).toBe(true);
    const third = (await catalog.insertOrGet(entry('again', 'c'))).entry.createdAtMs;
    expect(third).toBe(second + SECOND);
    expect((await catalog.get(entry('again', 'c')))?.createdAtMs).toBe(third);
    // Other names keep the clock's second.
    const other = (await catalog.insertOrGet(entry('other', 'd'))).entry.createdAtMs;
    expect(other).toBeLessThan(first);
  });

  it('an insert waiting on an uncommitted delete of the name follows the deleted version too', async () => {
    const catalog = createCatalog(db.pool);
    const first = await publishAhead(entry('racing', 'a'), 5);
    const deleter = await db.pool.connect();
    try {
      await deleter.query('BEGIN');
      await deleter.query(`DELETE FROM arkvory_artifacts WHERE repository = 'times' AND name = 'racing'`);
      const inserting = catalog.insertOrGet(entry('racing', 'b'));
      // The insert has read the row (still live to it) and waits for the deleter's commit.
      await waitUntil(async () => {
        const { rows } = await db.pool.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO arkvory_artifacts%'`,
        );
        return rows[0]!.n === '1';
      });
      await deleter.query('COMMIT');
      const result = await inserting;
      expect(result.inserted).toBe(true);
      expect(result.entry.createdAtMs).toBe(first + SECOND);
    } finally {
      deleter.release();
    }
  });

  it('survive the repository being deleted and created again', async () => {
    const catalog = createCatalog(db.pool);
    await createRepository(db.pool, 'recreated');
    const first = await publishAhead(entry('kept', 'a', 'recreated'), 5);
    await db.pool.query(`DELETE FROM arkvory_repositories WHERE name = 'recreated'`);
    await createRepository(db.pool, 'recreated');
    expect((await catalog.insertOrGet(entry('kept', 'b', 'recreated'))).entry.createdAtMs).toBe(first + SECOND);
  });

  it('are kept for a minute: older versions leave none, and a delete drops those past it', async () => {
    const catalog = createCatalog(db.pool);
    await publishAhead(entry('old', 'a'), -120);
    expect(await catalog.remove(entry('old', 'a'))).toBe(true);
    expect(await tombstones(entry('old', 'a'))).toEqual([]);
    await db.pool.query(
      `INSERT INTO arkvory_artifact_tombstones (repository, kind, name, version, asset, created_at)
       VALUES ('times', 'artifact', 'stale', '', '', now() - interval '2 minutes')`,
    );
    const recent = await publishAhead(entry('recent', 'a'), 0);
    expect(await catalog.remove(entry('recent', 'a'))).toBe(true);
    expect(await tombstones(entry('stale', 'a'))).toEqual([]);
    expect(await tombstones(entry('recent', 'a'))).toEqual([recent]);
  });
});
