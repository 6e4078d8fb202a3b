/**
 * Every PostgreSQL pool in the tree hears its errors. pg-pool re-emits the error of an idle client
 * (a connection PostgreSQL ended: a dropped test database, a restart, `pg_terminate_backend`) as
 * the pool's 'error' event, and an unheard one is an uncaught exception: a crashed gateway, or a
 * test file that fails after all its tests passed. `pool.end()` resolves before its connections
 * have closed, so even a pool that was ended can still emit. Tests open theirs with `openPool`
 * (test/harness/database.ts), which listens.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/paths.ts';

/** How far below `new …Pool(` the listener may be registered (a multi-line options object included). */
const LINES_TO_LISTENER = 20;
const POOL = /new (?:pg\.Pool|ResilientPool)\(/;
const LISTENER = /\.on\('error'/;

/** `file:line` of every pg pool made without an 'error' listener in the lines below it. */
export function unheardPools(file: string, source: string): string[] {
  const lines = source.split('\n');
  const unheard: string[] = [];
  lines.forEach((line, i) => {
    if (!POOL.test(line)) return;
    if (!lines.slice(i, i + LINES_TO_LISTENER + 1).some((l) => LISTENER.test(l))) unheard.push(`${file}:${i + 1}`);
  });
  return unheard;
}

describe('PostgreSQL pools', () => {
  it('finds a pool made without a listener, and none where one follows it', () => {
    expect(unheardPools('a.ts', "const pool = new pg.Pool({ max: 1 });\nawait pool.query('SELECT 1');")).toEqual([
      'a.ts:1',
    ]);
    expect(unheardPools('b.ts', 'const pool = new ResilientPool(\n  { max: 1 },\n);\n')).toEqual(['b.ts:1']);
    expect(unheardPools('c.ts', "const pool = new pg.Pool({ max: 1 });\npool.on('error', () => {});")).toEqual([]);
  });

  it('every pool a tracked TypeScript file makes listens for the errors of its idle connections', () => {
    const files = execFileSync('git', ['ls-files', '*.ts'], { cwd: REPO_ROOT, encoding: 'utf8' })
      .split('\n')
      .filter((f) => f !== '' && f !== 'test/contract/pool-errors.test.ts');
    const unheard = files.flatMap((f) => unheardPools(f, readFileSync(path.join(REPO_ROOT, f), 'utf8')));
    expect(unheard, 'pools without an error listener (in tests, open them with openPool)').toEqual([]);
  });
});
