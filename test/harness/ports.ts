/**
 * Loopback ports for the processes tests start, never handed out twice in one test run. A free port
 * (lib/free-port.ts: below the ephemeral range, so no client socket of the run takes it as its local
 * port before the server binds it) is free only while asked: two test files running side by side can be
 * told the same port, and the second process to bind it fails, or (a health check answered by the
 * other file's gateway) a test talks to a process that is not its own. A port is claimed by
 * creating a file named after it in the run's claims directory (ARKVORY_TEST_PORT_CLAIMS, made by
 * the global setup): the file system says which claimer came first. Other resources files must
 * not share (a multi-host file's network) are claimed the same way by name. Outside a test run (a
 * benchmark, a script) claims are kept in this process only.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { freeLoopbackPort as kernelFreePort } from '../../lib/free-port.ts';

/** The variable naming the run's claims directory; the global setup sets it before any worker starts. */
export const PORT_CLAIMS_VARIABLE = 'ARKVORY_TEST_PORT_CLAIMS';

/** Names claimed by this process (all of them when no claims directory is set). */
const claimedHere = new Set<string>();

/** A loopback port free now that no other caller in this test run was given. */
export async function freeLoopbackPort(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = await kernelFreePort();
    if (await claimPort(port)) return port;
  }
  throw new Error('no unclaimed loopback port after 100 tries (is the claims directory full of stale files?)');
}

/** True when `port` was claimed now for this caller; false when someone in the run has it already. */
export function claimPort(port: number): Promise<boolean> {
  return claimForRun(String(port));
}

/**
 * True when `name` (a port, or another resource the run's files must not share, such as a host
 * network) was claimed now for this caller; false when someone in the run has it already.
 */
export async function claimForRun(name: string): Promise<boolean> {
  if (claimedHere.has(name)) return false;
  claimedHere.add(name);
  const dir = process.env[PORT_CLAIMS_VARIABLE];
  if (!dir) return true;
  try {
    await writeFile(path.join(dir, name), `${process.pid}\n`, { flag: 'wx' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}
