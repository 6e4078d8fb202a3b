import { COMMANDS } from './index.ts';
import { UsageError } from './command.ts';

function topUsage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `Usage: arkvory <command> [options]\n\nCommands:\n${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}\n\nRun \`arkvory <command> --help\` for a command's options.\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(topUsage());
    return name ? 0 : 2;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    process.stderr.write(`arkvory: unknown command "${name}"\n\n${topUsage()}`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(`${command.usage}\n`);
    return 0;
  }
  try {
    return await command.run(rest, process.env);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`arkvory ${name}: ${err.message}\n\n${command.usage}\n`);
      return 2;
    }
    throw err;
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
