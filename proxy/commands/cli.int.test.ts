import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, ROOT, runCli } from '../../test/support/gateway.ts';
import type { Form, OptionSpecs } from './command.ts';
import { COMMANDS } from './index.ts';
import { runProcess, type ProcessResult } from '../../test/harness/index.ts';

/** Runs `work` over `items`, at most `limit` at a time (each runCli is a process start). */
async function inParallel<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await work(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: limit }, worker));
  return results;
}

/** `-o, --output` / `--scopes`: how --help must show each option of a form. */
function flagsOf(options: OptionSpecs | undefined): string[] {
  return Object.entries(options ?? {}).map(([name, spec]) => `${spec.short ? `-${spec.short}, ` : ''}--${name}`);
}

const requiredArgs = (f: Form) =>
  (f.args ?? '')
    .split(' ')
    .filter((a) => a && !a.startsWith('['))
    .map((_, i) => `arg${i}`);

describe('arkvory keys create with a mistyped option', () => {
  const db = useTestDatabase();

  it('`keys create bob --scope admin` exits 2 naming --scope, prints nothing on stdout and creates no key', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const bob = await runCli(['principals', 'create', 'bob'], env);
    expect(bob.code, bob.stderr).toBe(0);
    const typo = await runCli(['keys', 'create', 'bob', '--scope', 'admin'], env);
    expect(typo.code).toBe(2);
    expect(typo.stdout).toBe('');
    expect(typo.stderr).toBe('arkvory keys create: unknown option --scope (see arkvory keys create --help)\n');
    const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM arkvory_api_keys');
    expect(rows[0]!.n).toBe(0);
    expect(JSON.parse((await runCli(['keys', 'list', 'bob'], env)).stdout)).toEqual({ keys: [], nextCursor: null });
    // A missing value is refused the same way; the spelled-out option makes the admin key asked for.
    const missing = await runCli(['keys', 'create', 'bob', '--scopes'], env);
    expect([missing.code, missing.stdout, missing.stderr]).toEqual([
      2,
      '',
      'arkvory keys create: --scopes needs a value (see arkvory keys create --help)\n',
    ]);
    // A mistyped scope or kind is a usage error too (exit 2), found before the database is touched.
    for (const [option, value, said] of [
      ['--scopes', 'admn', '--scopes: scopes must be a non-empty list of read, write, admin'],
      ['--kind', 'servce', '--kind must be service or personal (got servce)'],
    ] as const) {
      const wrong = await runCli(['keys', 'create', 'bob', option, value], env);
      expect([wrong.code, wrong.stdout, wrong.stderr]).toEqual([
        2,
        '',
        `arkvory keys create: ${said} (see arkvory keys create --help)\n`,
      ]);
    }
    const made = await runCli(['keys', 'create', 'bob', '--scopes', 'admin'], env);
    expect(made.code, made.stderr).toBe(0);
    expect((JSON.parse(made.stdout) as { scopes: string[] }).scopes).toEqual(['admin']);
  });

  it('`npx arkvory` and `npm run --silent arkvory --` print bare JSON on stdout (no npm banner)', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    for (const [command, args] of [
      ['npx', ['arkvory', 'principals', 'list']],
      ['npm', ['run', '--silent', 'arkvory', '--', 'principals', 'list']],
    ] as const) {
      const { code, stdout, stderr } = await run(command, args, env);
      expect(code, `${command}: ${stderr}`).toBe(0);
      expect(
        (JSON.parse(stdout) as { principals: Array<{ name: string }> }).principals.map((p) => p.name),
        command,
      ).toEqual(['bob']);
    }
  }, 120_000);

  it('`keys create` and `keys rotate` with an --expires-in past 10 years exit 2 naming the option, before the database', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    expect((await runCli(['principals', 'create', 'eve'], env)).code).toBe(0);
    const made = await runCli(['keys', 'create', 'eve'], env);
    const { keyId } = JSON.parse(made.stdout) as { keyId: string };
    for (const args of [
      ['keys', 'create', 'eve', '--expires-in', '3651d'],
      ['keys', 'rotate', keyId, '--expires-in', '100000000d'],
    ]) {
      const form = args.slice(0, 2).join(' ');
      const long = await runCli(args, env);
      expect([long.code, long.stdout, long.stderr]).toEqual([
        2,
        '',
        `arkvory ${form}: --expires-in "${args[4]}" is longer than 3650d (10 years), the longest a key lives; leave it out for a key that does not expire (see arkvory ${form} --help)\n`,
      ]);
    }
    const { rows } = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM arkvory_api_keys k JOIN arkvory_principals p ON p.id = k.principal_id WHERE p.name = 'eve'",
    );
    expect(rows[0]!.n).toBe(1);
    expect((await runCli(['keys', 'create', 'eve', '--expires-in', '3650d'], env)).code).toBe(0);
  });
});

/** A command through npm (npx / npm run), with PATH so that the pinned node and npm are found. */
function run(command: string, args: readonly string[], env: Record<string, string>): Promise<ProcessResult> {
  return runProcess(command, args, { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env } });
}

describe('arkvory commands as real processes (proxy/commands/command.test.ts does every form of every command in-process)', () => {
  // One process per command and case costs about a second of CPU each: the real process is checked on
  // commands of each kind (database, client, file, server), the in-process tests cover the rest.
  const SAMPLED = COMMANDS.filter((c) => ['keys', 'backup', 'get', 'ratelimit', 'serve'].includes(c.name));
  const TABLE = SAMPLED.map((command) => {
    const first = command.forms[0]!;
    return { command, form: first, words: first.name ? [command.name, first.name] : [command.name] };
  });

  it('an unknown option exits 2 with one line on stderr naming it, nothing on stdout, before anything runs', async () => {
    expect(SAMPLED.map((c) => c.name).sort()).toEqual(['backup', 'get', 'keys', 'ratelimit', 'serve']);
    const results = await inParallel(TABLE, 2, async ({ form: f, words }) => {
      // No database and no data directory: refusing needs neither, and starts no gateway.
      const r = await runCli([...words, ...requiredArgs(f), '--no-such-option', 'x'], {});
      return { words, ...r };
    });
    for (const { words, code, stdout, stderr } of results) {
      const prog = `arkvory ${words.join(' ')}`;
      expect({ code, stdout, stderr }, prog).toEqual({
        code: 2,
        stdout: '',
        stderr: `${prog}: unknown option --no-such-option (see ${prog} --help)\n`,
      });
    }
  }, 180_000);

  it('--help exits 0 and lists every form and every option each form declares', async () => {
    const results = await inParallel(SAMPLED, 2, async (c) => ({ c, ...(await runCli([c.name, '--help'], {})) }));
    for (const { c, code, stdout, stderr } of results) {
      expect(code, `${c.name}: ${stderr}`).toBe(0);
      expect(stdout).toBe(`${c.usage}\n`);
      expect(stdout).toContain(c.description);
      for (const f of c.forms) {
        expect(stdout, c.name).toContain(`arkvory ${c.name}${f.name ? ` ${f.name}` : ''}`);
        for (const flag of flagsOf(f.options)) expect(stdout, `${c.name} ${f.name ?? ''}`).toContain(`  ${flag}`);
      }
      expect(stdout).toContain('  -h, --help');
    }
  }, 180_000);

  it('a missing subcommand or argument, an unknown subcommand or command, is exit 2 and one line', async () => {
    for (const [args, line] of [
      [['keys'], 'arkvory keys: missing subcommand (one of: create, list, revoke, rotate) (see arkvory keys --help)'],
      [['keys', 'craete', 'bob'], 'arkvory keys: unknown subcommand "craete" (one of: create, list, revoke, rotate)'],
      [['grants', 'add', 'ci-bot'], 'arkvory grants add: missing <repository> (see arkvory grants add --help)'],
      [['gc', 'now'], 'arkvory gc: unexpected argument "now" (see arkvory gc --help)'],
      [['kyes'], 'arkvory: unknown command "kyes" (see arkvory --help)'],
    ] as const) {
      const r = await runCli([...args], {});
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.startsWith(line), r.stderr).toBe(true);
      expect(r.stderr.split('\n')).toHaveLength(2);
    }
  });
});

/** Options the docs show because they are refused (the typo example). */
const WRONG_ON_PURPOSE = new Set(['keys --scope']);

describe('an admin command whose database cannot serve it', () => {
  const unmigrated = useTestDatabase({ migrated: false });

  it('exits 1 (a runtime failure, not usage) with one line naming the cause: a database that does not answer, a schema behind', async () => {
    const dataDir = await makeTempDir();
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    const dead = await runCli(['principals', 'list'], {
      ARKVORY_DATABASE_URL: 'postgres://u:hunter2pw@127.0.0.1:1/db',
      ARKVORY_DATA_DIR: dataDir,
    });
    expect({ code: dead.code, stdout: dead.stdout }).toEqual({ code: 1, stdout: '' });
    expect(dead.stderr).toMatch(/^arkvory principals list: cannot reach the database: .*\n$/);
    expect(dead.stderr).not.toContain('hunter2pw');
    expect(dead.stderr).not.toContain('--help');

    const behind = await runCli(['principals', 'list'], {
      ARKVORY_DATABASE_URL: unmigrated.url,
      ARKVORY_DATA_DIR: dataDir,
    });
    expect({ code: behind.code, stdout: behind.stdout, stderr: behind.stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: 'arkvory principals list: the database schema is behind this code; run `npm run migrate` first\n',
    });
  });
});

describe('README and docs/', () => {
  it('show only options that the command they belong to declares', async () => {
    const files = [
      path.join(ROOT, 'README.md'),
      ...(await readdir(path.join(ROOT, 'docs')))
        .filter((f) => f.endsWith('.md'))
        .map((f) => path.join(ROOT, 'docs', f)),
    ];
    const names = COMMANDS.map((c) => c.name).sort((a, b) => b.length - a.length);
    const use = new RegExp(
      `\\barkvory(?:\\.js)? (${names.map((n) => n.replace('-', '\\-')).join('|')})\\b([^\`|\\n]*)`,
      'g',
    );
    let checked = 0;
    for (const file of files) {
      for (const [, name, rest] of (await readFile(file, 'utf8')).matchAll(use)) {
        const command = COMMANDS.find((c) => c.name === name)!;
        const words = rest!.trim().split(/\s+/);
        const f = command.forms.find((candidate) => candidate.name && candidate.name === words[0]);
        const declared = (f ? [f] : command.forms).flatMap((candidate) => [
          '--help',
          '-h',
          ...Object.entries(candidate.options ?? {}).flatMap(([n, spec]) => [
            `--${n}`,
            ...(spec.short ? [`-${spec.short}`] : []),
          ]),
        ]);
        // Comments after `#` in shell examples are prose; the flags they name are checked all the same.
        for (const flag of rest!.match(/(?<![\w-])--?[a-z][a-z0-9-]*/g) ?? []) {
          if (WRONG_ON_PURPOSE.has(`${name} ${flag}`)) continue;
          expect(declared, `${path.relative(ROOT, file)}: arkvory ${name}${rest}`).toContain(flag);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(10);
  });
});

describe('arkvory get, put and presign with a URL that is not http(s)', () => {
  it('is a usage error at once (exit 2, one line naming where it came from, no stack), the URL not quoted back', async () => {
    const dir = await makeTempDir('arkvory-cli-url-');
    const link = path.join(dir, 'link');
    await writeFile(link, 'http://[bad/x?signature=S3cretSig\n');
    const key = { ARKVORY_KEY: 'ark_abcdabcdabcdabcd_S3cretKey' };
    const out = path.join(dir, 'out');
    const cases: Array<[string[], Record<string, string>, string]> = [
      [['get', '--link-file', link, '-o', out], {}, 'arkvory get: the URL to get is not an http:// or https:// URL'],
      [
        ['get', 'r/a', '-o', out],
        { ...key, ARKVORY_URL: 'ftp://gw' },
        'arkvory get: --url or ARKVORY_URL is not an http:// or https:// URL',
      ],
      [
        ['get', 'http://127.0.0.1:1/r/a', '--mirror', 'garbage', '-o', out],
        {},
        'arkvory get: --mirror is not an http:// or https:// URL',
      ],
      [
        ['put', '/etc/hostname', 'http://[bad/x'],
        key,
        'arkvory put: the URL to put to is not an http:// or https:// URL',
      ],
      [
        ['put', '/etc/hostname', 'r/a', '--url', 'ftp://gw'],
        key,
        'arkvory put: --url or ARKVORY_URL is not an http:// or https:// URL',
      ],
      [
        ['presign', 'r', 'a', '--url', 'ftp://gw'],
        key,
        'arkvory presign: --url or ARKVORY_URL is not an http:// or https:// URL',
      ],
      [
        ['presign', 'r', 'a', '--url', 'not a url'],
        key,
        'arkvory presign: --url or ARKVORY_URL is not an http:// or https:// URL',
      ],
    ];
    for (const [args, env, said] of cases) {
      const r = await runCli(args, env);
      expect([r.code, r.stdout, r.stderr], args.join(' ')).toEqual([
        2,
        '',
        `${said} (see arkvory ${args[0]} --help)\n`,
      ]);
    }
  });
});

describe('arkvory cache purge names its blob one way', () => {
  it('--sha256 with --repository or --artifact is a usage error, not a purge of the --sha256 alone', async () => {
    const sha = 'a'.repeat(64);
    for (const extra of [
      ['--repository', 'libs'],
      ['--artifact', 'app'],
    ]) {
      const r = await runCli(['cache', 'purge', '--sha256', sha, ...extra], {});
      expect([r.code, r.stdout, r.stderr]).toEqual([
        2,
        '',
        'arkvory cache purge: give --sha256, or --repository and --artifact (see arkvory cache purge --help)\n',
      ]);
    }
  });
});
