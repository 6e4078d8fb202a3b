/**
 * Purge requests as a slice cache reads them (real PostgreSQL): at start, from the time its
 * directory notes as swept last; while it runs, by id.
 */
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { purgesAtStart, purgesSince, requestCachePurge } from './slice-rows.ts';

const db = useTestDatabase();
const blob = (c: string) => c.repeat(64);
const sorted = (blobs: string[] | 'all') => (blobs === 'all' ? blobs : [...blobs].sort());

describe('purge requests', () => {
  it('at start: those since a minute before the note, every retained one without a usable note, all slices past the retention', async () => {
    await requestCachePurge(db.pool, [blob('a')]);
    await db.pool.query(`UPDATE arkvory_cache_purges SET requested_at = now() - interval '2 hours'`);
    await requestCachePurge(db.pool, [blob('b')]);
    const now = (await db.pool.query<{ now: Date }>('SELECT now() AS now')).rows[0]!.now;
    const at = (ms: number) => new Date(now.getTime() + ms);

    const sinceHour = await purgesAtStart(db.pool, at(-3600_000));
    expect(sinceHour.blobs).toEqual([blob('b')]);
    // A request timed up to a minute before the note may have committed after that sweep read.
    expect(sorted((await purgesAtStart(db.pool, at(-2 * 3600_000 + 30_000))).blobs)).toEqual([blob('a'), blob('b')]);
    expect(sorted((await purgesAtStart(db.pool, undefined)).blobs)).toEqual([blob('a'), blob('b')]);
    // A note ahead of the database's clock says nothing.
    expect(sorted((await purgesAtStart(db.pool, at(3600_000))).blobs)).toEqual([blob('a'), blob('b')]);
    // Requests older than a day are cleared at the next purge: a note that old may have missed some.
    expect((await purgesAtStart(db.pool, at(-25 * 3600_000))).blobs).toBe('all');

    // Sweeps while running go on from the newest id seen at start.
    await requestCachePurge(db.pool, [blob('c')]);
    const next = await purgesSince(db.pool, sinceHour.lastId);
    expect(next.blobs).toEqual([blob('c')]);
    expect(await purgesSince(db.pool, next.lastId)).toMatchObject({ lastId: next.lastId, blobs: [] });
  });
});
