import { COMMANDS } from './index.ts';
import { invoke, UsageError, usageErrorLine } from './command.ts';

function topUsage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `Usage: arkvory <command> [options]\n\nCommands:\n${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}\n\nRun \`arkvory <command> --help\` for a command's options.\n`;
}

/**
 * Runs one command line. Results go to stdout; a usage error (unknown command, subcommand or
 * option, a missing value or argument) is one line on stderr, nothing on stdout, exit 2.
 */
async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(topUsage());
    return 0;
  }
  if (!name) {
    process.stderr.write(topUsage());
    return 2;
  }
  const command = COMMANDS.find((c) => c.name === name);
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
        throw err;
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
