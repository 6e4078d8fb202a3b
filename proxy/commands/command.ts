/** One `arkvory` subcommand. `run` resolves with the process exit code. */
export interface Command {
  name: string;
  summary: string;
  /** Full `--help` text. */
  usage: string;
  run(args: string[], env: NodeJS.ProcessEnv): Promise<number>;
}

export class UsageError extends Error {
  override readonly name = 'UsageError';
  readonly code = 'usage' as const;
}

/** Parses `--flag value`, `--flag=value` and bare `--switch` arguments; positionals keep their order. */
export function parseArgs(
  args: string[],
  booleans: readonly string[] = [],
): { flags: Map<string, string | true>; positionals: string[] } {
  const flags = new Map<string, string | true>();
  const positionals: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') {
      positionals.push(...args.slice(i + 1));
      break;
    }
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    if (eq !== -1) flags.set(name, arg.slice(eq + 1));
    else if (booleans.includes(name)) flags.set(name, true);
    else {
      const value = args[i + 1];
      if (value === undefined || value.startsWith('--')) throw new UsageError(`--${name} needs a value`);
      flags.set(name, value);
      i++;
    }
  }
  return { flags, positionals };
}
