import { cliFailureLine, cliFailureOf } from './cli-failure.ts';
import { loadCommand } from './command-modules.ts';
import { CommandFailure, invoke, UsageError, usageErrorLine } from './command.ts';

async function topUsage(): Promise<string> {
  const { COMMANDS } = await import('./index.ts');
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `Usage: arkvory <command> [options]\n\nCommands:\n${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}\n\nRun \`arkvory <command> --help\` for a command's options.\n`;
}

/**
 * Runs one command line. Results go to stdout; a usage error (unknown command, subcommand or
 * option, a missing value or argument, an argument's value out of its range) is one line on stderr,
 * nothing on stdout, exit 2, before any connection; an expected failure (cli-failure.ts) is one line
 * `arkvory: <code>: <message>`, exit 1, or 3 for a change done whose audit entry was not recorded.
 * Only a bug shows a stack.
 */
async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(await topUsage());
    return 0;
  }
  if (!name) {
    process.stderr.write(await topUsage());
    return 2;
  }
  const command = await loadCommand(name);
  if (!command) {
    process.stderr.write(usageErrorLine('arkvory', `unknown command "${name}"`));
    return 2;
  }
  const invocation = invoke(command, rest);
  switch (invocation.kind) {
    case 'help':
      process.stdout.write(invocation.text);
      return 0;
    case 'usage-error':
      process.stderr.write(usageErrorLine(invocation.prog, invocation.message));
      return 2;
    case 'run':
      try {
        return await invocation.form.run(invocation.input, process.env);
      } catch (err) {
        if (err instanceof UsageError) {
          process.stderr.write(usageErrorLine(invocation.prog, err.message, err.seeHelp));
          return 2;
        }
        if (err instanceof CommandFailure) {
          process.stderr.write(usageErrorLine(invocation.prog, err.message, false));
          return 1;
        }
        const failure = cliFailureOf(err);
        if (failure === undefined) throw err;
        process.stderr.write(cliFailureLine(failure));
        return failure.exitCode;
      }
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // Lingering handles (timers, sockets of a failed start) must not keep a stopped gateway alive.
    setTimeout(() => process.exit(code), 2000).unref();
  },
  (err: unknown) => {
    process.stderr.write(`arkvory: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
