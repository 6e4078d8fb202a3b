/**
 * A long-running child process whose output is kept for failure messages: gateways, routers,
 * nginx, redis-server, PostgreSQL on a test host. `runProcess` (run-process.ts) is for commands
 * that run to their end.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { WatchedProcess } from './wait.ts';

/** How long a stopping process may take before SIGKILL (an embedded PostgreSQL stops with it). */
export const STOP_GRACE_MS = 10_000;
/** How long `exited` waits after the exit for the child's output pipes to close. */
const OUTPUT_DRAIN_MS = 1000;

export interface ManagedProcess extends WatchedProcess {
  readonly child: ChildProcess;
  /** Exit code, or the signal's name when a signal ended it; resolved once its output has been read. */
  readonly exited: Promise<number | string>;
  /** Everything written to stdout and stderr so far. */
  logs(): string;
  stdout(): string;
  stderr(): string;
  /** Parsed pino JSON lines of stdout (a line cut short by a kill is skipped). */
  logLines(): Array<Record<string, unknown>>;
  isRunning(): boolean;
  /** Sends a signal while the process runs (SIGSTOP, SIGCONT…). */
  signal(signal: NodeJS.Signals): void;
  /**
   * Sends `signal` (after SIGCONT, so a stopped process can act on it) and resolves with the exit
   * code or signal; SIGKILL follows after `killAfterMs` when given (a test watching a graceful
   * shutdown gives none).
   */
  stop(signal?: NodeJS.Signals, killAfterMs?: number): Promise<number | string>;
}

/**
 * A child's environment: PATH, HOME and LANG of this process plus `extra` (undefined values left
 * out). NODE_COMPILE_CACHE passes too when set (vitest.config.ts sets it): a gateway or CLI process
 * then reads its TypeScript modules compiled by an earlier one, about half the start's CPU.
 */
export function processEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    LANG: process.env.LANG ?? 'C.UTF-8',
    ...(process.env.NODE_COMPILE_CACHE ? { NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE } : {}),
  };
  for (const [name, value] of Object.entries(extra)) if (value !== undefined) env[name] = value;
  return env;
}

function pushParsed(lines: Array<Record<string, unknown>>, text: string): void {
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // truncated by SIGKILL
    }
  }
}

/**
 * The pino JSON lines of a growing output, each ended line parsed once: tests ask for them again
 * and again while they wait (every 50 ms, of a gateway that logs a line per request).
 */
class LogLines {
  readonly #parsed: Array<Record<string, unknown>> = [];
  #upTo = 0;

  of(output: string): Array<Record<string, unknown>> {
    const end = output.lastIndexOf('\n') + 1;
    if (end > this.#upTo) {
      pushParsed(this.#parsed, output.slice(this.#upTo, end));
      this.#upTo = end;
    }
    const lines = this.#parsed.slice();
    // The last line, not ended yet (the rest still in the pipe, or cut short by a kill): if whole.
    if (end < output.length) pushParsed(lines, output.slice(end));
    return lines;
  }
}

/**
 * The exit code (or signal) of `child` once its output has been read: 'exit' may come before the
 * last bytes were read from the pipes (a curl's status line, a FAIL line before exit 1), so this
 * waits for them to close too, though at most OUTPUT_DRAIN_MS (a grandchild may keep them open).
 */
export function exitedWithOutput(child: ChildProcess): Promise<number | string> {
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      const result = code ?? signal ?? -1;
      const timer = setTimeout(() => resolve(result), OUTPUT_DRAIN_MS);
      child.once('close', () => {
        clearTimeout(timer);
        resolve(result);
      });
    });
  });
}

export function startProcess(
  command: string,
  args: readonly string[],
  options: { name?: string; env?: NodeJS.ProcessEnv; cwd?: string } = {},
): ManagedProcess {
  const child = spawn(command, args, {
    env: options.env ?? processEnv(),
    cwd: options.cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const logLines = new LogLines();
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  // A missing binary surfaces as an exit with the spawn error in the logs, not an unhandled event.
  child.on('error', (err) => (stderr += `${err.message}\n`));
  const exited = new Promise<number | string>((resolve) => {
    child.on('error', () => {
      if (child.pid === undefined) resolve(-1);
    });
    void exitedWithOutput(child).then(resolve);
  });
  const isRunning = () => child.exitCode === null && child.signalCode === null && child.pid !== undefined;
  return {
    name: options.name ?? baseName(command),
    child,
    exited,
    logs: () => stdout + stderr,
    stdout: () => stdout,
    stderr: () => stderr,
    logLines: () => logLines.of(stdout),
    isRunning,
    signal(signal) {
      if (isRunning()) child.kill(signal);
    },
    async stop(signal = 'SIGTERM', killAfterMs) {
      if (!isRunning()) return exited;
      child.kill('SIGCONT');
      child.kill(signal);
      const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

function baseName(command: string): string {
  return command.slice(command.lastIndexOf('/') + 1);
}
