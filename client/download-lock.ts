/**
 * One `download` per output at a time: `<output>.partial.lock`, created exclusively, names the
 * process (pid and host) holding it. Two runs on one output share its partial file: one starting
 * over truncated it while the other, its own bytes hashed as they came, renamed the file, so the
 * final name took the other run's truncated bytes (and its later writes, through its open handle).
 * A lock left by a process of this host that is gone (killed) is taken over; any other is refused.
 */
import { constants, existsSync } from 'node:fs';
import { open, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import { ArkvoryClientError } from './errors.ts';

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_RDONLY, O_WRONLY } = constants;

interface Holder {
  readonly pid: number;
  readonly host: string;
}

/** True when no process `pid` runs on this host (a signal 0 finds none). */
function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

async function holderOf(lock: string): Promise<Holder | undefined> {
  try {
    const held = JSON.parse(await readFile(lock, { encoding: 'utf8', flag: O_RDONLY | O_NOFOLLOW })) as Partial<Holder>;
    return Number.isSafeInteger(held.pid) && typeof held.host === 'string'
      ? { pid: held.pid!, host: held.host }
      : undefined;
  } catch {
    return undefined;
  }
}

/** Takes the lock of `output`; resolves to its release. Refused (`target_locked`) while another run holds it. */
export async function lockOutput(output: string): Promise<() => Promise<void>> {
  const lock = `${output}.partial.lock`;
  const me: Holder = { pid: process.pid, host: os.hostname() };
  for (let tries = 0; ; tries++) {
    try {
      const handle = await open(lock, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o644);
      try {
        await handle.writeFile(JSON.stringify(me));
      } finally {
        await handle.close();
      }
      return () => rm(lock, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = await holderOf(lock);
    // A lock of this host whose process is gone was left by a killed run: taken over (once).
    if (tries === 0 && holder && holder.host === me.host && gone(holder.pid)) {
      await rm(lock, { force: true });
      continue;
    }
    // Released between the two looks: try again (once).
    if (tries === 0 && holder === undefined && !existsSync(lock)) continue;
    throw new ArkvoryClientError(
      'target_locked',
      `Another download to this file is running${holder ? ` (process ${holder.pid} on ${holder.host})` : ''}; if none is, remove ${lock}.`,
    );
  }
}
