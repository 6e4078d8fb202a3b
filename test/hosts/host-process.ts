/**
 * A real process started inside one host's network namespace (`ip netns exec`, which execs the
 * command, so the child's pid is the process itself and signals reach it directly).
 */
import { startProcess, type ManagedProcess } from '../harness/index.ts';

export type HostProcess = ManagedProcess;

/** The launcher that runs a command inside namespace `ns`. */
export const inNamespace = (ns: string): string[] => ['ip', 'netns', 'exec', ns];

export function startInNamespace(
  ns: string,
  name: string,
  command: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): HostProcess {
  const [ip, ...netns] = inNamespace(ns);
  return startProcess(ip!, [...netns, command, ...args], {
    name,
    env: options.env ?? { PATH: process.env.PATH },
    ...(options.cwd ? { cwd: options.cwd } : {}),
  });
}
