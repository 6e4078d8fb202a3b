import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { dumpDatabase } from './database-dump.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

/**
 * A pool whose one table never runs out of rows: the dump ends only when it is aborted. `onFetch`
 * sees each FETCH (the count so far).
 */
function endlessTablePool(onFetch: (n: number) => void): {
  pool: pg.Pool;
  fetches: () => number;
  released: () => boolean;
} {
  let fetches = 0;
  let released = false;
  const client = {
    async query(sql: string) {
      if (sql.startsWith('FETCH')) {
        onFetch(++fetches);
        return { rows: Array.from({ length: 500 }, (_, i) => ({ row: `{"id":${fetches * 500 + i}}` })) };
      }
      if (sql.includes('FROM pg_class')) return { rows: [{ name: 'arkvory_audit_events' }] };
      if (sql.startsWith('SELECT to_json(now())')) return { rows: [{ t: '2026-12-05T00:00:00Z', v: 1 }] };
      return { rows: [] };
    },
    release() {
      released = true;
    },
  };
  return {
    pool: { connect: async () => client } as unknown as pg.Pool,
    fetches: () => fetches,
    released: () => released,
  };
}

describe('dumpDatabase', () => {
  it('stops within a table when aborted (SIGTERM), not only between tables', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-dump-'));
    dirs.push(dir);
    const controller = new AbortController();
    const stopped = new Error('stopped by SIGTERM');
    const fake = endlessTablePool((n) => {
      if (n === 3) controller.abort(stopped);
      // Without a check inside the table the dump would never end: fail instead of hanging.
      if (n > 50) throw new Error('the dump went on reading a table after it was aborted');
    });
    await expect(dumpDatabase(fake.pool, path.join(dir, 'database.jsonl'), controller.signal)).rejects.toBe(stopped);
    expect(fake.fetches()).toBe(3);
    expect(fake.released()).toBe(true);
  });
});
