/**
 * The `arkvory` command model. A command declares its forms (one, or one per subcommand); a form
 * declares its positional arguments and its options. Parsing (node:util `parseArgs`, strict), the
 * usage errors and the `--help` text are all derived from those declarations, so an option cannot be
 * accepted without being listed, nor listed without being accepted.
 */
import { type ParseArgsOptionsConfig, parseArgs } from 'node:util';
import { GatewayError } from '../server/errors.ts';

/** One option of a form: `--name VALUE` (string) or `--name` (boolean). */
export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  /** A one-letter alias, e.g. `o` for `-o`. */
  readonly short?: string;
  /** May be given more than once; every value is kept, in order. */
  readonly multiple?: boolean;
  /** The value as `--help` shows it: `FILE`, `30d`, `service|personal`. */
  readonly value?: string;
  readonly description: string;
}

export type OptionSpecs = Readonly<Record<string, OptionSpec>>;

/** Every form takes `-h`/`--help`; no form may declare an option of that name. */
export const HELP_OPTION: OptionSpec = { type: 'boolean', short: 'h', description: 'print this help and exit' };

type OptionNames<O extends OptionSpecs, T extends OptionSpec['type'], Multiple extends boolean> = {
  [K in keyof O & string]: O[K] extends { type: T }
    ? (O[K] extends { multiple: true } ? true : false) extends Multiple
      ? K
      : never
    : never;
}[keyof O & string];

/** What a form's `run` gets: its parsed options (by declared name only) and its positional arguments. */
export class Input<O extends OptionSpecs = OptionSpecs> {
  readonly positionals: readonly string[];
  readonly #values: Readonly<Record<string, string | boolean | string[] | undefined>>;

  constructor(values: Readonly<Record<string, string | boolean | string[] | undefined>>, positionals: string[]) {
    this.#values = values;
    this.positionals = positionals;
  }

  /** The value of a string option, if given (parseForm refuses one given twice). */
  string(name: OptionNames<O, 'string', false>): string | undefined {
    const v = this.#values[name];
    return typeof v === 'string' ? v : undefined;
  }

  /** Every value of a repeatable string option, in order. */
  strings(name: OptionNames<O, 'string', true>): string[] {
    const v = this.#values[name];
    return Array.isArray(v) ? v : [];
  }

  boolean(name: OptionNames<O, 'boolean', false>): boolean {
    return this.#values[name] === true;
  }
}

/** One form of a command: the whole command (`arkvory backup …`), or one subcommand (`arkvory keys create …`). */
export interface Form {
  /** The subcommand; absent for a command with a single form. */
  readonly name?: string;
  /**
   * Positional arguments as the usage line shows them, separated by spaces: `<principal>`, `FILE`;
   * one in brackets (`[LIMITER]`) is optional. Checked before `run`: too few or too many is a usage error.
   */
  readonly args?: string;
  /** A few words printed beside the form's usage line. */
  readonly summary?: string;
  readonly options?: OptionSpecs;
  run(input: Input, env: NodeJS.ProcessEnv): Promise<number>;
}

export interface FormSpec<O extends OptionSpecs> extends Omit<Form, 'options' | 'run'> {
  readonly options?: O;
  run(input: Input<O>, env: NodeJS.ProcessEnv): Promise<number>;
}

/** Declares a form; its options' names and types reach `run` (`input.string('scopes')` is checked by tsc). */
export function form<const O extends OptionSpecs = Record<never, OptionSpec>>(spec: FormSpec<O>): Form {
  return spec as unknown as Form;
}

export interface CommandSpec {
  readonly name: string;
  /** One line, for `arkvory --help`. */
  readonly summary: string;
  /** The prose of `--help`, after the usage lines and before the options. */
  readonly description: string;
  /** One unnamed form, or one named form per subcommand. */
  readonly forms: readonly Form[];
}

/** One `arkvory` command. */
export interface Command extends CommandSpec {
  /** Its full `--help` text: usage lines, description, the options of every form. */
  readonly usage: string;
}

export class UsageError extends GatewayError {
  override readonly name = 'UsageError';
  declare readonly code: 'usage';
  /** Whether the one-line message ends with "(see arkvory … --help)": arguments yes, an unreachable database no. */
  readonly seeHelp: boolean;

  constructor(message: string, options: { seeHelp?: boolean } = {}) {
    super('usage', message);
    this.seeHelp = options.seeHelp ?? true;
  }
}

/**
 * A command that could not do its work for a reason outside its command line (its database does not
 * answer, or its schema is behind the code): one line on stderr, exit 1, as any runtime failure.
 */
export class CommandFailure extends GatewayError {
  override readonly name = 'CommandFailure';
  declare readonly code: 'database_unreachable' | 'schema_behind';

  constructor(code: 'database_unreachable' | 'schema_behind', message: string) {
    super(code, message);
  }
}

const WIDTH = 100;

function formOptions(f: Form): OptionSpecs {
  return { ...f.options, help: HELP_OPTION };
}

function flagOf(name: string, spec: OptionSpec): string {
  return spec.short ? `-${spec.short}` : `--${name}`;
}

function withValue(flag: string, spec: OptionSpec): string {
  return spec.type === 'string' ? `${flag} ${spec.value ?? 'VALUE'}` : flag;
}

/** `arkvory keys create <principal> [--scopes read,write,admin] [--expires-in 30d] …` */
export function synopsis(command: { name: string }, f: Form): string {
  const options = Object.entries(f.options ?? {}).map(
    ([name, spec]) => `[${withValue(flagOf(name, spec), spec)}]${spec.multiple ? '...' : ''}`,
  );
  return ['arkvory', command.name, f.name, f.args, ...options].filter(Boolean).join(' ');
}

/** Words of `text` in lines of at most `width` columns (a longer word gets a line of its own). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

/** The `Options:` lines of a form: `  -o, --output FILE   where to write …`, help last. */
export function optionLines(options: OptionSpecs): string[] {
  const rows = Object.entries(options).map(([name, spec]) => ({
    left: withValue(`${spec.short ? `-${spec.short}, ` : ''}--${name}`, spec),
    spec,
  }));
  const column = Math.max(...rows.map((r) => r.left.length)) + 3;
  return rows.flatMap(({ left, spec }) => {
    const text = `${spec.description}${spec.multiple ? '; repeatable' : ''}`;
    const [first = '', ...rest] = wrap(text, Math.max(40, WIDTH - column - 2));
    return [`  ${left.padEnd(column)}${first}`, ...rest.map((l) => `  ${' '.repeat(column)}${l}`)];
  });
}

function usageLines(command: CommandSpec, forms: readonly Form[]): string {
  const lines = forms.map((f) => ({ line: synopsis(command, f), summary: f.summary }));
  if (lines.length === 1) return `Usage: ${lines[0]!.line}${lines[0]!.summary ? `\n  ${lines[0]!.summary}` : ''}`;
  const column = Math.max(...lines.map((l) => l.line.length)) + 2;
  return `Usage:\n${lines.map((l) => `  ${l.summary ? `${l.line.padEnd(column)}${l.summary}` : l.line}`).join('\n')}`;
}

/** `--help` of one form (a subcommand's, or a single-form command's). */
export function formHelp(command: CommandSpec, f: Form): string {
  return `${usageLines(command, [f])}\n\n${command.description}\n\nOptions:\n${optionLines(formOptions(f)).join('\n')}\n`;
}

/** `--help` of a whole command: every form's usage line, the description, then each subcommand's options. */
export function commandHelp(command: CommandSpec): string {
  const [only] = command.forms;
  if (command.forms.length === 1 && !only!.name) return formHelp(command, only!);
  const sections = command.forms
    .filter((f) => Object.keys(f.options ?? {}).length > 0)
    .map((f) => `Options of ${command.name} ${f.name}:\n${optionLines(f.options!).join('\n')}\n\n`);
  const help = optionLines({
    help: {
      ...HELP_OPTION,
      description: `print this help (after a subcommand: that subcommand's)`,
    },
  });
  return `${usageLines(command, command.forms)}\n\n${command.description}\n\n${sections.join('')}Options:\n${help.join('\n')}\n`;
}

/** A command from its declarations; `usage` (its `--help`) is derived from them. */
export function defineCommand(spec: CommandSpec): Command {
  const named = spec.forms.filter((f) => f.name !== undefined).length;
  if (spec.forms.length === 0 || (named !== spec.forms.length && !(spec.forms.length === 1 && named === 0)))
    throw new Error(`${spec.name}: one unnamed form, or every form named`);
  for (const f of spec.forms) {
    for (const [name, option] of Object.entries(f.options ?? {}))
      if (name === 'help' || option.short === 'h') throw new Error(`${spec.name}: --help/-h is every form's own`);
  }
  return { ...spec, usage: commandHelp(spec).trimEnd() };
}

/** What the arguments after a command's name ask for. `prog` names the form: `arkvory keys create`. */
export type Invocation =
  | { readonly kind: 'help'; readonly text: string }
  | { readonly kind: 'usage-error'; readonly prog: string; readonly message: string }
  | { readonly kind: 'run'; readonly prog: string; readonly form: Form; readonly input: Input };

/** The first argument that makes the strict parse refuse, as one phrase naming it. */
function refusal(tokens: ReturnType<typeof tokensOf>, options: OptionSpecs): string | undefined {
  for (const token of tokens) {
    if (token.kind !== 'option') continue;
    const spec = options[token.name];
    if (!spec) return `unknown option ${token.rawName}`;
    if (spec.type === 'boolean' && token.value !== undefined) return `${token.rawName} takes no value`;
    if (spec.type === 'string' && token.value === undefined) return `${token.rawName} needs a value`;
    if (spec.type === 'string' && !token.inlineValue && token.value?.startsWith('-'))
      return `${token.rawName} needs a value (for a value starting with "-", write --${token.name}=${token.value})`;
  }
  return undefined;
}

/**
 * An option that is not repeatable given twice: the later would silently win, so `--sha256 A
 * --sha256 B` would purge B alone and `--scopes admin … --scopes read` make a read key.
 */
function repeated(tokens: ReturnType<typeof tokensOf>, options: OptionSpecs): string | undefined {
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== 'option' || options[token.name]?.multiple) continue;
    if (seen.has(token.name)) return `--${token.name} given twice; give it once`;
    seen.add(token.name);
  }
  return undefined;
}

function positionalsProblem(args: string | undefined, positionals: readonly string[]): string | undefined {
  const declared = (args ?? '').split(/\s+/).filter(Boolean);
  const required = declared.filter((a) => !a.startsWith('['));
  if (positionals.length < required.length) return `missing ${required[positionals.length]}`;
  if (positionals.length > declared.length) return `unexpected argument "${positionals[declared.length]}"`;
  return undefined;
}

/** The declarations as node:util `parseArgs` takes them. */
function parseArgsOptions(options: OptionSpecs): ParseArgsOptionsConfig {
  return Object.fromEntries(
    Object.entries(options).map(([name, { type, short, multiple }]) => [
      name,
      { type, ...(short ? { short } : {}), ...(multiple ? { multiple } : {}) },
    ]),
  );
}

/** `args` read leniently, as tokens: what the strict parse refuses is looked up in these. */
function tokensOf(args: string[], options: OptionSpecs) {
  return parseArgs({ args, options: parseArgsOptions(options), strict: false, allowPositionals: true, tokens: true })
    .tokens;
}

/** True when the tokens ask for help: `-h`/`--help` as an option (not as an option's value, not after `--`). */
function asksForHelp(tokens: ReturnType<typeof tokensOf>): boolean {
  return tokens.some((t) => t.kind === 'option' && t.name === 'help');
}

/** Parses one form's arguments: node:util `parseArgs` with `strict: true`, then the positional count. */
export function parseForm(command: CommandSpec, f: Form, args: string[]): Invocation {
  const prog = `arkvory ${command.name}${f.name ? ` ${f.name}` : ''}`;
  const options = formOptions(f);
  const tokens = tokensOf(args, options);
  if (asksForHelp(tokens)) return { kind: 'help', text: formHelp(command, f) };
  let parsed: { values: Record<string, string | boolean | (string | boolean)[] | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args, options: parseArgsOptions(options), strict: true, allowPositionals: true });
  } catch (err) {
    if (!String((err as NodeJS.ErrnoException).code).startsWith('ERR_PARSE_ARGS')) throw err;
    const message = refusal(tokens, options) ?? (err as Error).message.split('\n')[0]!;
    return { kind: 'usage-error', prog, message };
  }
  const problem = repeated(tokens, options) ?? positionalsProblem(f.args, parsed.positionals);
  if (problem) return { kind: 'usage-error', prog, message: problem };
  return {
    kind: 'run',
    prog,
    form: f,
    input: new Input(parsed.values as Record<string, string | boolean | string[] | undefined>, parsed.positionals),
  };
}

/** Resolves a command's arguments (everything after its name) to help, a usage error or a form to run. */
export function invoke(command: Command, args: string[]): Invocation {
  const [only] = command.forms;
  if (command.forms.length === 1 && !only!.name) return parseForm(command, only!, args);
  const [sub, ...rest] = args;
  const f = command.forms.find((candidate) => candidate.name === sub);
  if (f) return parseForm(command, f, rest);
  if (asksForHelp(tokensOf(args, { help: HELP_OPTION }))) return { kind: 'help', text: commandHelp(command) };
  const names = command.forms.map((candidate) => candidate.name).join(', ');
  return {
    kind: 'usage-error',
    prog: `arkvory ${command.name}`,
    message:
      sub === undefined ? `missing subcommand (one of: ${names})` : `unknown subcommand "${sub}" (one of: ${names})`,
  };
}

/** The one line a usage error prints on stderr. */
export function usageErrorLine(prog: string, message: string, seeHelp = true): string {
  return `${prog}: ${message}${seeHelp ? ` (see ${prog} --help)` : ''}\n`;
}
