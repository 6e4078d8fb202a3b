/**
 * A real process started inside one host's network namespace (`ip netns exec`, which execs the
 * command, so the child's pid is the process itself and signals reach it directly).
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface HostProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly exited: Promise<number | string>;
  logs(): string;
  stdout(): string;
  stderr(): string;
  /** Parsed pino JSON lines of stdout (a line cut by a kill is skipped). */
  logLines(): Array<Record<string, unknown>>;
  isRunning(): boolean;
  signal(signal: NodeJS.Signals): void;
  /** SIGTERM, SIGKILL after `graceMs`; resolves with the exit code or signal. */
  stop(graceMs?: number): Promise<number | string>;
}

export function startInNamespace(
  ns: string,
  name: string,
  command: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): HostProcess {
  const child = spawn('ip', ['netns', 'exec', ns, command, ...args], {
    env: options.env ?? { PATH: process.env.PATH },
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const isRunning = () => child.exitCode === null && child.signalCode === null;
  return {
    name,
    child,
    exited,
    logs: () => stdout + stderr,
    stdout: () => stdout,
    stderr: () => stderr,
    logLines() {
      const lines: Array<Record<string, unknown>> = [];
      for (const line of stdout.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          lines.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          // truncated by SIGKILL
        }
      }
      return lines;
    },
    isRunning,
    signal(signal) {
      if (isRunning()) child.kill(signal);
    },
    async stop(graceMs = 5000) {
      if (!isRunning()) return exited;
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
