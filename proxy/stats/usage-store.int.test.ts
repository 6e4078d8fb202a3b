/**
 * addUsage against a real PostgreSQL: a batch is added to both usage tables whole or not at all, so
 * the recorder's retry of a failed flush counts nothing twice.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/support/database.ts';
import { runCli } from '../../test/support/gateway.ts';
import { CURSORS, encodeCursor } from '../../policy/auth/page.ts';
import {
  addUsage,
  beginFlush,
  mostDownloaded,
  notDownloadedFor,
  principalDays,
  transactionStatuses,
  type UsageConnection,
} from './usage-store.ts';
import type { UsageBatch } from './usage-tally.ts';

let db: TestDatabase & { drop(): Promise<void> };

beforeAll(async () => {
  db = await createTestDatabase();
}, 60_000);

afterAll(async () => {
  await db?.drop();
});

const principalId = randomUUID();
const batch: UsageBatch = {
  artifacts: [
    {
      key: { repository: 'libs', kind: 'artifact', name: 'a.bin', version: '', asset: '' },
      downloads: 3,
      bytes: 12_288,
      lastAtMs: Date.UTC(2026, 11, 4, 12),
      lastDownloader: principalId,
    },
  ],
  principalDays: [{ principalId, day: '2026-12-04', requests: 5, bytesDown: 12_800, bytesUp: 8_192 }],
};

async function counts() {
  const artifacts = await db.pool.query(`SELECT downloads::int, bytes::int FROM arkvory_usage_artifacts`);
  const days = await db.pool.query(
    `SELECT requests::int, bytes_down::int, bytes_up::int FROM arkvory_usage_principal_days`,
  );
  return { artifacts: artifacts.rows, days: days.rows };
}

describe('addUsage', () => {
  it('adds nothing when the principals part fails, so the batch kept for the next flush counts once', async () => {
    // The second table refuses the write (a full disk, a statement timeout, a failover would too).
    await db.pool.query(
      `CREATE FUNCTION refuse_usage() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no space left'; END $$`,
    );
    await db.pool.query(
      `CREATE TRIGGER refuse_usage BEFORE INSERT ON arkvory_usage_principal_days FOR EACH ROW EXECUTE FUNCTION refuse_usage()`,
    );
    await expect(addUsage(db.pool, batch)).rejects.toThrow('no space left');
    expect(await counts()).toEqual({ artifacts: [], days: [] });

    await db.pool.query(`DROP TRIGGER refuse_usage ON arkvory_usage_principal_days`);
    await db.pool.query(`DROP FUNCTION refuse_usage()`);
    await addUsage(db.pool, batch);
    expect(await counts()).toEqual({
      artifacts: [{ downloads: 3, bytes: 12_288 }],
      days: [{ requests: 5, bytes_down: 12_800, bytes_up: 8_192 }],
    });
    // A second batch adds to both.
    await addUsage(db.pool, batch);
    expect(await counts()).toEqual({
      artifacts: [{ downloads: 6, bytes: 24_576 }],
      days: [{ requests: 10, bytes_down: 25_600, bytes_up: 16_384 }],
    });
  });

  it('adds a batch with rows for one table only', async () => {
    const other = randomUUID();
    const key = { repository: 'libs', kind: 'artifact' as const, name: 'b.bin', version: '', asset: '' };
    await addUsage(db.pool, {
      artifacts: [],
      principalDays: [{ principalId: other, day: '2026-12-05', requests: 2, bytesDown: 10, bytesUp: 0 }],
    });
    await addUsage(db.pool, {
      artifacts: [{ key, downloads: 1, bytes: 4, lastAtMs: Date.UTC(2026, 11, 5), lastDownloader: other }],
      principalDays: [],
    });
    const day = await db.pool.query(`SELECT requests::int FROM arkvory_usage_principal_days WHERE principal_id = $1`, [
      other,
    ]);
    const artifact = await db.pool.query(`SELECT downloads::int FROM arkvory_usage_artifacts WHERE name = 'b.bin'`);
    expect([day.rows, artifact.rows]).toEqual([[{ requests: 2 }], [{ downloads: 1 }]]);
  });

  it('saturates a sum at the bigint maximum instead of failing the batch, and every later one, on that row', async () => {
    const key = { repository: 'libs', kind: 'artifact' as const, name: 'huge.bin', version: '', asset: '' };
    const other = randomUUID();
    await db.pool.query(
      `INSERT INTO arkvory_usage_artifacts (repository, kind, name, version, asset, downloads, bytes, last_downloaded_at)
       VALUES ('libs', 'artifact', 'huge.bin', '', '', 9223372036854775800, 9223372036854775000, '2026-12-01')`,
    );
    const next: UsageBatch = {
      artifacts: [{ key, downloads: 10, bytes: 4096, lastAtMs: Date.UTC(2026, 11, 5), lastDownloader: other }],
      principalDays: [{ principalId: other, day: '2026-12-05', requests: 10, bytesDown: 4096, bytesUp: 0 }],
    };
    await addUsage(db.pool, next);
    await addUsage(db.pool, next);
    const huge = await db.pool.query(
      `SELECT downloads::text, bytes::text, last_downloader::text FROM arkvory_usage_artifacts WHERE name = 'huge.bin'`,
    );
    expect(huge.rows).toEqual([
      { downloads: '9223372036854775807', bytes: '9223372036854775807', last_downloader: other },
    ]);
    const day = await db.pool.query(`SELECT requests::int FROM arkvory_usage_principal_days WHERE principal_id = $1`, [
      other,
    ]);
    expect(day.rows).toEqual([{ requests: 20 }]);
  });
});

describe('transactionStatuses', () => {
  // A flush whose COMMIT went unanswered asks each later flush what became of it. After a failover
  // to a replica the commit never reached, or a restore, the server's counter is behind that id:
  // pg_xact_status refused it ("is in the future"), so every flush failed from then on and the
  // usage of every principal was dropped once the backlog filled, until a restart.
  it('answers aborted for an id this server never gave, and still knows its own', async () => {
    const client = (await db.pool.connect()) as unknown as UsageConnection & { release(): void };
    try {
      const committed = await beginFlush(client);
      await client.query('COMMIT');
      const aborted = await beginFlush(client);
      await client.query('ROLLBACK');
      const future = String(BigInt(committed) + 1_000_000_000n);
      const outcomes = await transactionStatuses(client, [committed, aborted, future]);
      expect(Object.fromEntries(outcomes)).toEqual({
        [committed]: 'committed',
        [aborted]: 'aborted',
        [future]: 'aborted',
      });
    } finally {
      client.release();
    }
  });

  it('says in progress of a transaction still open, though it is the newest the server gave', async () => {
    const open = (await db.pool.connect()) as unknown as UsageConnection & { release(): void };
    const asking = (await db.pool.connect()) as unknown as UsageConnection & { release(): void };
    try {
      const xid = await beginFlush(open);
      expect(Object.fromEntries(await transactionStatuses(asking, [xid]))).toEqual({ [xid]: 'in progress' });
      await open.query('ROLLBACK');
    } finally {
      open.release();
      asking.release();
    }
  });

  it('pages the three listings past any limit: walking the cursors gives every row once, ties in the count included', async () => {
    await db.pool.query('DELETE FROM arkvory_usage_artifacts');
    await db.pool.query('DELETE FROM arkvory_usage_principal_days');
    await db.pool.query(`INSERT INTO arkvory_repositories (name) VALUES ('walk')`);
    // 9 artifacts downloaded 0, 0, 0, 3, 3, 3, 3, 7 and 9 times; each published (idle for 0 days), 3 at one instant.
    await db.pool.query(
      `INSERT INTO arkvory_usage_artifacts (repository, kind, name, downloads, bytes, last_downloaded_at)
         SELECT 'walk', 'artifact', 'a' || i, (ARRAY[0, 0, 0, 3, 3, 3, 3, 7, 9])[i], 1, now() - interval '2 days'
           FROM generate_series(1, 9) i`,
    );
    await db.pool.query(
      `INSERT INTO arkvory_artifacts (repository, kind, name, sha256, size_bytes, content_type, created_at)
         SELECT 'walk', 'artifact', 'a' || i, lpad(i::text, 64, '0'), 1, 'x',
                CASE WHEN i <= 3 THEN timestamptz '2026-01-01 00:00:00.123456' ELSE now() - make_interval(days => i) END
           FROM generate_series(1, 9) i`,
    );
    // 2 days of 4 principals, two of them with the same requests.
    await db.pool.query(
      `INSERT INTO arkvory_usage_principal_days (principal_id, day, requests, bytes_down, bytes_up)
         SELECT gen_random_uuid(), d, (ARRAY[5, 5, 2, 8])[i], 0, 0
           FROM generate_series(1, 4) i, (VALUES (date '2026-12-01'), (date '2026-12-02')) AS days(d)`,
    );
    const walk = async <T>(
      read: (cursor: string | undefined) => Promise<{ items: T[]; nextCursor: string | null }>,
    ) => {
      const items: T[] = [];
      let cursor: string | undefined;
      for (let pages = 0; pages < 20; pages++) {
        const page = await read(cursor);
        expect(page.items.length).toBeLessThanOrEqual(2);
        items.push(...page.items);
        if (page.nextCursor === null) return items;
        cursor = page.nextCursor;
      }
      throw new Error('the walk does not end');
    };
    const all = (await mostDownloaded(db.pool, { limit: 100 })).items;
    expect(all.map((a) => a.downloads)).toEqual([9, 7, 3, 3, 3, 3, 0, 0, 0]);
    expect(await walk((cursor) => mostDownloaded(db.pool, { limit: 2, cursor }))).toEqual(all);
    const idle = (await notDownloadedFor(db.pool, { days: 0, limit: 100 })).items;
    expect(idle).toHaveLength(9);
    expect(await walk((cursor) => notDownloadedFor(db.pool, { days: 0, limit: 2, cursor }))).toEqual(idle);
    const days = (await principalDays(db.pool, { limit: 100 })).items;
    expect(days).toHaveLength(8);
    expect(await walk((cursor) => principalDays(db.pool, { limit: 2, cursor }))).toEqual(days);
    // A cursor of another listing, or one PostgreSQL could not take, is the client's fault.
    const top = (await mostDownloaded(db.pool, { limit: 2 })).nextCursor!;
    await expect(principalDays(db.pool, { limit: 2, cursor: top })).rejects.toMatchObject({ code: 'invalid_request' });
    const past = encodeCursor(CURSORS.statsTop, ['9999999999999999999', 'walk', 'artifact', 'a1', '', '']);
    await expect(mostDownloaded(db.pool, { limit: 2, cursor: past })).rejects.toMatchObject({
      code: 'invalid_request',
    });
    const feb30 = encodeCursor(CURSORS.statsPrincipals, ['2026-02-30', '1', randomUUID()]);
    await expect(principalDays(db.pool, { limit: 2, cursor: feb30 })).rejects.toMatchObject({
      code: 'invalid_request',
    });
  });

  it('arkvory stats says where more rows are and reads them: --cursor, --all; a cursor not its own is exit 2', async () => {
    await db.pool.query('DELETE FROM arkvory_usage_principal_days');
    // 5 principal days, past a page of 2.
    await db.pool.query(
      `INSERT INTO arkvory_usage_principal_days (principal_id, day, requests, bytes_down, bytes_up)
         SELECT gen_random_uuid(), date '2026-12-01' + i, i, 0, 0 FROM generate_series(1, 5) i`,
    );
    const env = { ARKVORY_DATABASE_URL: db.url };
    const lines = (stdout: string) =>
      stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { day: string });
    const all = (await principalDays(db.pool, { limit: 100 })).items.map((d) => d.day);
    expect(all).toHaveLength(5);
    const first = await runCli(['stats', 'principals', '--limit', '2'], env);
    expect(first.code, first.stderr).toBe(0);
    expect(lines(first.stdout).map((d) => d.day)).toEqual(all.slice(0, 2));
    const more = /^more: --cursor ([A-Za-z0-9_-]+)\n$/.exec(first.stderr);
    expect(more, first.stderr).not.toBeNull();
    const rest = await runCli(['stats', 'principals', '--limit', '2', '--cursor', more![1]!, '--all'], env);
    expect(rest.code, rest.stderr).toBe(0);
    expect(rest.stderr).toBe('');
    expect(lines(rest.stdout).map((d) => d.day)).toEqual(all.slice(2));
    const forged = await runCli(['stats', 'artifacts', '--cursor', more![1]!], env);
    expect([forged.code, forged.stderr]).toEqual([
      2,
      expect.stringContaining('cursor was made for the principal days'),
    ]);
  });
});
