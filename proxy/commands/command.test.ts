/** The command model in-process: strict parsing, usage errors and --help derived from each form's declarations. */
import { describe, expect, it } from 'vitest';
import { defineCommand, form, type Command, type Form, type Invocation, invoke, HELP_OPTION } from './command.ts';
import { COMMANDS } from './index.ts';

/** Every form of every command, with the words that select it: `['keys', 'create']`, `['backup']`. */
const FORMS = COMMANDS.flatMap((command) =>
  command.forms.map((f) => ({ command, form: f, words: f.name ? [command.name, f.name] : [command.name] })),
);

/** Arguments that satisfy a form's positionals: one word per required argument. */
const positionalsFor = (f: Form) =>
  (f.args ?? '')
    .split(' ')
    .filter((a) => a && !a.startsWith('['))
    .map((_, i) => `arg${i}`);

const argsOf = (words: string[]) => words.slice(1);

function expectUsageError(invocation: Invocation, prog: string, message: string | RegExp): void {
  expect(invocation.kind).toBe('usage-error');
  if (invocation.kind !== 'usage-error') return;
  expect(invocation.prog).toBe(prog);
  if (typeof message === 'string') expect(invocation.message).toBe(message);
  else expect(invocation.message).toMatch(message);
}

const demo: Command = defineCommand({
  name: 'demo',
  summary: 'a command to test the model with',
  description: 'Prose that stays.',
  forms: [
    form({
      name: 'make',
      args: '<name> [<note>]',
      options: {
        level: { type: 'string', value: 'N', description: 'how much' },
        mirror: { type: 'string', multiple: true, value: 'URL', description: 'another place' },
        output: { type: 'string', short: 'o', value: 'FILE', description: 'where' },
        force: { type: 'boolean', description: 'even so' },
      },
      run: async () => 0,
    }),
    form({ name: 'list', run: async () => 0 }),
  ],
});

describe('parsing a form (node:util parseArgs, strict)', () => {
  it('refuses an option that is not repeatable given twice, by either spelling, naming it: the later would silently win', () => {
    for (const args of [
      ['make', 'x', '--level', '3', '--level', '4'],
      ['make', 'x', '--level=3', '--level', '3'],
      ['make', 'x', '-o', 'a', '--output', 'b'],
      ['make', 'x', '--force', '--force'],
    ]) {
      const name = args[2]!.startsWith('-o') || args[2] === '-o' ? 'output' : args[2]!.replace(/^--|=.*$/g, '');
      expectUsageError(invoke(demo, args), 'arkvory demo make', `--${name} given twice; give it once`);
    }
    // A repeatable option stays repeatable.
    expect(invoke(demo, ['make', 'x', '--mirror', 'a', '--mirror', 'b']).kind).toBe('run');
  });

  it('gives run the declared options by name, repeated options in order, and the positionals', () => {
    const inv = invoke(demo, ['make', 'x', '--level', '3', '-o', 'f.bin', '--mirror=a', '--mirror', 'b', '--force']);
    expect(inv.kind).toBe('run');
    if (inv.kind !== 'run') return;
    expect(inv.prog).toBe('arkvory demo make');
    expect(inv.input.positionals).toEqual(['x']);
    const input = inv.input as unknown as {
      string(n: string): string | undefined;
      strings(n: string): string[];
      boolean(n: string): boolean;
    };
    expect([input.string('level'), input.string('output'), input.strings('mirror'), input.boolean('force')]).toEqual([
      '3',
      'f.bin',
      ['a', 'b'],
      true,
    ]);
  });

  it('keeps `--` : everything after it is a positional, even --help or an unknown option', () => {
    const inv = invoke(demo, ['make', '--', '--help']);
    expect(inv.kind === 'run' && inv.input.positionals).toEqual(['--help']);
    const two = invoke(demo, ['make', 'x', '--', '--scope']);
    expect(two.kind === 'run' && two.input.positionals).toEqual(['x', '--scope']);
  });

  it('refuses an unknown option, long or short, with or without a value, naming it', () => {
    expectUsageError(invoke(demo, ['make', 'x', '--levle', '3']), 'arkvory demo make', 'unknown option --levle');
    expectUsageError(invoke(demo, ['make', 'x', '--levle=3']), 'arkvory demo make', 'unknown option --levle');
    expectUsageError(invoke(demo, ['make', 'x', '-x']), 'arkvory demo make', 'unknown option -x');
    // An option of another subcommand is unknown here.
    expectUsageError(invoke(demo, ['list', '--force']), 'arkvory demo list', 'unknown option --force');
  });

  it('refuses a missing value, an option where a value belongs, and a value given to a switch', () => {
    expectUsageError(invoke(demo, ['make', 'x', '--level']), 'arkvory demo make', '--level needs a value');
    expectUsageError(invoke(demo, ['make', 'x', '-o']), 'arkvory demo make', '-o needs a value');
    expectUsageError(invoke(demo, ['make', 'x', '--level', '--force']), 'arkvory demo make', /^--level needs a value/);
    expectUsageError(invoke(demo, ['make', 'x', '--force=yes']), 'arkvory demo make', '--force takes no value');
    // A value that starts with "-" is given with "=".
    const inv = invoke(demo, ['make', 'x', '--level=-1']);
    expect(inv.kind).toBe('run');
  });

  it('checks the positional count against the declared arguments', () => {
    expectUsageError(invoke(demo, ['make']), 'arkvory demo make', 'missing <name>');
    expect(invoke(demo, ['make', 'a', 'b']).kind).toBe('run');
    expectUsageError(invoke(demo, ['make', 'a', 'b', 'c']), 'arkvory demo make', 'unexpected argument "c"');
    expectUsageError(invoke(demo, ['list', 'a']), 'arkvory demo list', 'unexpected argument "a"');
  });

  it('refuses a missing or unknown subcommand', () => {
    expectUsageError(invoke(demo, []), 'arkvory demo', 'missing subcommand (one of: make, list)');
    expectUsageError(invoke(demo, ['mkae']), 'arkvory demo', 'unknown subcommand "mkae" (one of: make, list)');
    expectUsageError(invoke(demo, ['--force']), 'arkvory demo', /^unknown subcommand "--force"/);
  });

  it('answers --help or -h anywhere before `--`, even beside an unknown option, with the help of what it follows', () => {
    for (const args of [['--help'], ['-h'], ['mkae', '--help']]) {
      const inv = invoke(demo, args);
      expect(inv.kind === 'help' && inv.text).toBe(`${demo.usage}\n`);
    }
    for (const args of [
      ['make', '--help'],
      ['make', '--levle', '3', '-h'],
    ]) {
      const inv = invoke(demo, args);
      expect(inv.kind === 'help' && inv.text.startsWith('Usage: arkvory demo make <name> [<note>] [--level N]')).toBe(
        true,
      );
    }
  });

  it("derives --help from the declarations: every form's usage line, the prose, each option with its value", () => {
    expect(demo.usage).toBe(
      [
        'Usage:',
        '  arkvory demo make <name> [<note>] [--level N] [--mirror URL]... [-o FILE] [--force]',
        '  arkvory demo list',
        '',
        'Prose that stays.',
        '',
        'Options of demo make:',
        '  --level N           how much',
        '  --mirror URL        another place; repeatable',
        '  -o, --output FILE   where',
        '  --force             even so',
        '',
        'Options:',
        "  -h, --help   print this help (after a subcommand: that subcommand's)",
      ].join('\n'),
    );
  });

  it('refuses declarations that take over --help or mix named and unnamed forms', () => {
    const run = async () => 0;
    expect(() =>
      defineCommand({
        name: 'x',
        summary: 's',
        description: 'd',
        forms: [form({ options: { help: HELP_OPTION }, run })],
      }),
    ).toThrow(/--help/);
    expect(() =>
      defineCommand({ name: 'x', summary: 's', description: 'd', forms: [form({ run }), form({ name: 'y', run })] }),
    ).toThrow(/named/);
  });
});

describe('every arkvory command', () => {
  it.each(FORMS.map((f) => [f.words.join(' '), f] as const))(
    '%s: an unknown option, and a missing value of each string option, are usage errors naming it',
    (_name, { command, form: f, words }) => {
      const prog = `arkvory ${words.join(' ')}`;
      const base = [...argsOf(words), ...positionalsFor(f)];
      expectUsageError(invoke(command, [...base, '--no-such-option']), prog, 'unknown option --no-such-option');
      for (const [name, spec] of Object.entries(f.options ?? {})) {
        if (spec.type !== 'string') continue;
        expectUsageError(invoke(command, [...base, `--${name}`]), prog, `--${name} needs a value`);
        if (spec.short)
          expectUsageError(invoke(command, [...base, `-${spec.short}`]), prog, `-${spec.short} needs a value`);
      }
    },
  );

  it.each(FORMS.map((f) => [f.words.join(' '), f] as const))(
    '%s --help: the usage line, the prose and every declared option with its value',
    (_name, { command, form: f, words }) => {
      const inv = invoke(command, [...argsOf(words), '--help']);
      expect(inv.kind).toBe('help');
      if (inv.kind !== 'help') return;
      expect(inv.text.startsWith(`Usage: arkvory ${words.join(' ')}`)).toBe(true);
      expect(inv.text).toContain(`\n\n${command.description}\n\n`);
      for (const [name, spec] of Object.entries({ ...f.options, help: HELP_OPTION })) {
        const flag = `${spec.short ? `-${spec.short}, ` : ''}--${name}${spec.type === 'string' ? ` ${spec.value}` : ''}`;
        expect(inv.text).toMatch(
          new RegExp(`\\n  ${flag.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}  +${spec.description.split(' ')[0]}`),
        );
      }
    },
  );

  it.each(COMMANDS.map((c) => [c.name, c] as const))(
    '%s: every --flag its prose mentions is an option one of its forms declares',
    (_name, command) => {
      const declared = new Set(command.forms.flatMap((f) => Object.keys(f.options ?? {})).map((n) => `--${n}`));
      for (const flag of command.description.match(/(?<![\w-])--[a-z][a-z0-9-]*/g) ?? [])
        expect(declared, `${command.name}: ${flag}`).toContain(flag);
    },
  );
});

describe("an argument's or option's value a command does not take", () => {
  // A database that refuses every connection: a form that reached it would fail with
  // database_unreachable (exit 1) instead of the usage error (exit 2) it owes before connecting.
  const env = { ARKVORY_DATABASE_URL: 'postgres://u:p@127.0.0.1:1/db', ARKVORY_DATA_DIR: '/nonexistent/arkvory-data' };
  const WEIGHT = 'the weight must be an integer from 1 to 1000';
  const LIMIT = '--limit must be an integer from 1 to 1000';
  it.each([
    [['principals', 'weight', 'bob', '0'], `${WEIGHT} (got 0)`],
    [['principals', 'weight', 'bob', '1001'], `${WEIGHT} (got 1001)`],
    [['principals', 'weight', 'bob', '1e3'], `${WEIGHT} (got 1e3)`],
    [['principals', 'create', 'no spaces'], /^principal name must match/],
    [['principals', 'create', '6f9619ff-8b86-d011-b42d-00c04fc964ff'], /shape of a principal id/],
    [['principals', 'list', '--limit', '0'], `${LIMIT} (got 0)`],
    [['principals', 'certs', 'bob', '--limit', '5000'], `${LIMIT} (got 5000)`],
    [['keys', 'list', 'bob', '--limit', 'ten'], `${LIMIT} (got ten)`],
    [['repos', 'list', '--limit', '1001'], `${LIMIT} (got 1001)`],
    [['grants', 'list', '--limit=-1'], `${LIMIT} (got -1)`],
    [['rules-service', 'list', '--limit', '0'], `${LIMIT} (got 0)`],
    [['ratelimit', 'show', '--limit', '0'], `${LIMIT} (got 0)`],
    [['repos', 'create', 'Upper'], /^repository name must match/],
    [['repos', 'ceiling', 'r', '--download', '1000'], /^--download must be 0 \(no ceiling\) or an integer from 65536/],
    [['repos', 'ceiling', 'r', '--upload', String(2 ** 41)], /^--upload must be 0 \(no ceiling\)/],
    [
      ['repos', 'ceiling', 'r', '--max-transfers', '100001'],
      '--max-transfers must be an integer from 0 to 100000 (got 100001)',
    ],
    [['groups', 'set', 'g', '--download', '1'], /^--download must be 0 \(no ceiling\)/],
    [['groups', 'set', 'bad name'], /^group name must match/],
    [['grants', 'add', 'bob', 'r', 'admin'], 'the permission must be read or write (got admin)'],
    [['rules-service', 'unset', 'gateway_request', 'host', 'x'], 'KIND must be principal or repository (got host)'],
    // Numbers are decimal digits only, in every option (lib/decimal.ts): what Number() would also read is refused.
    [['quota', 'set', '--repository', 'r', '--bytes', '0x10'], '"0x10" is not a size (e.g. 8M, 1G, 1048576)'],
    [['quota', 'set', '--repository', 'r', '--bytes', '1e3'], '"1e3" is not a size (e.g. 8M, 1G, 1048576)'],
    [['quota', 'set', '--repository', 'r', '--bytes=-0'], '"-0" is not a size (e.g. 8M, 1G, 1048576)'],
    [['quota', 'set', '--repository', 'r', '--bytes', ' 5'], '" 5" is not a size (e.g. 8M, 1G, 1048576)'],
    [
      ['quota', 'set', '--repository', 'r', '--bytes', '9007199254740992'],
      '"9007199254740992" must be a size of at most 9007199254740991 bytes',
    ],
    [['quota', 'set', '--repository', 'r', '--bytes', '8388608G'], /^"8388608G" must be a size of at most/],
    [['principals', 'weight', 'bob', ' 5'], `${WEIGHT} (got  5)`],
    [['principals', 'weight', 'bob', '0x10'], `${WEIGHT} (got 0x10)`],
    [['principals', 'list', '--limit', '0x10'], `${LIMIT} (got 0x10)`],
    [['principals', 'list', '--limit', '1e2'], `${LIMIT} (got 1e2)`],
    [
      ['repos', 'ceiling', 'r', '--max-transfers', '1e2'],
      '--max-transfers must be an integer from 0 to 100000 (got 1e2)',
    ],
    [['repos', 'ceiling', 'r', '--download=-0'], /^--download must be 0 \(no ceiling\)/],
    [['backup', '/nonexistent/b', '--keep', '1e3'], '--keep must be an integer from 1 to 9007199254740991 (got 1e3)'],
    [['backup', '/nonexistent/b', '--keep', '0x10'], '--keep must be an integer from 1 to 9007199254740991 (got 0x10)'],
    [['backup', '/nonexistent/b', '--keep', ' 3'], '--keep must be an integer from 1 to 9007199254740991 (got  3)'],
    [['keys', 'create', 'bob', '--expires-in', '1e3'], '"1e3" is not a duration (e.g. 3600, 90m, 12h, 30d)'],
    [['stats', 'artifacts', '--limit', '0x10'], 'limit must be an integer from 1 to 1000'],
  ] as const)('%j is a usage error before anything is opened', async (words, message) => {
    const command = COMMANDS.find((c) => c.name === words[0])!;
    const invocation = invoke(command, [...words.slice(1)]);
    expect(invocation.kind).toBe('run');
    if (invocation.kind !== 'run') return;
    // A form's run may throw before its first await, as cli.ts's try takes it.
    const refused = (async () => invocation.form.run(invocation.input, env))();
    await expect(refused).rejects.toMatchObject({ name: 'UsageError' });
    await refused.catch((err: Error) =>
      typeof message === 'string' ? expect(err.message).toBe(message) : expect(err.message).toMatch(message),
    );
  });
});

describe('numbers written with leading zeros', () => {
  it('are read in decimal by every parser, 0 in any spelling where 0 is allowed', async () => {
    const { parseSize } = await import('./client-commands.ts');
    const { parseDuration } = await import('./auth-commands.ts');
    const { pageLimit } = await import('../../policy/auth/page.ts');
    expect(parseSize('00', { zero: true })).toBe(0);
    expect(parseSize('0K', { zero: true })).toBe(0);
    expect(parseSize('010')).toBe(10);
    expect(parseSize(`${'0'.repeat(20)}1M`)).toBe(1024 ** 2);
    expect(() => parseSize('00')).toThrow(/must be a positive size/);
    expect(parseDuration('00', { zero: true })).toBe(0);
    expect(parseDuration('090m')).toBe(5400);
    expect(pageLimit('00000010')).toBe(10);
  });
});
