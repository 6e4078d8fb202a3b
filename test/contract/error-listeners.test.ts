/**
 * Connections in the tree hear their errors. An 'error' event nobody listens for is an uncaught
 * exception: a crashed gateway, or a test file that fails after all its tests passed (and a
 * promise waiting on that connection that never settles).
 *
 * - PostgreSQL pools, everywhere: pg-pool re-emits the error of an idle client (a connection
 *   PostgreSQL ended: a dropped test database, a restart, `pg_terminate_backend`) as the pool's
 *   'error'. `pool.end()` resolves before its connections have closed, so even an ended pool can
 *   still emit. Tests open theirs with `openPool` (test/harness/database.ts), which listens.
 * - Sockets and HTTP requests a test opens itself: a reset under load is a failed assertion
 *   when heard, an uncaught exception when not.
 *
 * Found by a listener (`.on('error'`, `.once('error'`) within a few lines below the call.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/paths.ts';

/** How far below the call the listener may be registered (a multi-line options object included). */
const LINES_TO_LISTENER = 30;
const POOL = /new (?:pg\.Pool|ResilientPool)\(/;
const CONNECTION = /\b(?:net\.(?:connect|createConnection)|tls\.connect|https?\.(?:request|get)|http2\.connect)\(/;
const LISTENER = /\.(?:on|once)\('error'/;
const SELF = 'test/contract/error-listeners.test.ts';

/** `file:line` of every call matching `made` with no 'error' listener in the lines below it. */
function unheard(file: string, source: string, made: RegExp): string[] {
  const lines = source.split('\n');
  const found: string[] = [];
  lines.forEach((line, i) => {
    if (!made.test(line)) return;
    if (!lines.slice(i, i + LINES_TO_LISTENER + 1).some((l) => LISTENER.test(l))) found.push(`${file}:${i + 1}`);
  });
  return found;
}

function tracked(pattern: string): string[] {
  return execFileSync('git', ['ls-files', pattern], { cwd: REPO_ROOT, encoding: 'utf8' })
    .split('\n')
    .filter((f) => f !== '' && f !== SELF);
}

const read = (file: string) => readFileSync(path.join(REPO_ROOT, file), 'utf8');

describe('error listeners', () => {
  it('finds a call without a listener below it, and none where one follows', () => {
    expect(unheard('a.ts', "const pool = new pg.Pool({ max: 1 });\nawait pool.query('SELECT 1');", POOL)).toEqual([
      'a.ts:1',
    ]);
    expect(unheard('b.ts', 'const pool = new ResilientPool(\n  { max: 1 },\n);\n', POOL)).toEqual(['b.ts:1']);
    expect(unheard('c.ts', "const pool = new pg.Pool({ max: 1 });\npool.on('error', () => {});", POOL)).toEqual([]);
    expect(unheard('d.ts', 'http.get(url, (res) => res.resume());', CONNECTION)).toEqual(['d.ts:1']);
    expect(unheard('e.ts', "const s = net.connect(port);\ns.once('error', reject);", CONNECTION)).toEqual([]);
  });

  it('every PostgreSQL pool a tracked TypeScript file makes listens for the errors of its idle connections', () => {
    const found = tracked('*.ts').flatMap((f) => unheard(f, read(f), POOL));
    expect(found, 'pools without an error listener (in tests, open them with openPool)').toEqual([]);
  });

  it('every socket and HTTP request a test opens itself listens for its errors', () => {
    // A git pathspec's `*` crosses folders: `test/*.ts` is every file below test/ (its helpers too).
    const tests = new Set([...tracked('*.test.ts'), ...tracked('test/*.ts')]);
    const found = [...tests].flatMap((f) => unheard(f, read(f), CONNECTION));
    expect(found, 'connections opened by tests without an error listener').toEqual([]);
  });
});
