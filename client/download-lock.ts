/**
 * One `download` per output at a time: `<output>.partial.lock`, created exclusively, names the
 * process (pid and host) holding it. Two runs on one output share its partial file: one starting
 * over truncated it while the other, its own bytes hashed as they came, renamed the file, so the
 * final name took the other run's truncated bytes (and its later writes, through its open handle).
 * A lock left by a process of this host that is gone (killed) is taken over; any other is refused.
 */
import { constants, existsSync } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import os from 'node:os';
import { ArkvoryClientError } from './errors.ts';

const { O_CREAT, O_EXCL, O_NONBLOCK, O_NOFOLLOW, O_RDONLY, O_WRONLY } = constants;

/**
 * The text of `file` when it is a regular file of at most `limit` bytes, else undefined. The lock
 * and state files sit in the output's directory, which others may write (a shared one): a FIFO
 * planted there blocked a plain read forever (opened without blocking here, and refused), and a huge
 * file was read whole into memory. A symlink is not followed.
 */
export async function readSmallFile(file: string, limit = 4096): Promise<string | undefined> {
  const handle = await open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  try {
    const stats = await handle.stat();
    if (!stats.isFile() || stats.size > limit) return undefined;
    const buffer = Buffer.alloc(limit + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return bytesRead > limit ? undefined : buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

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
    const held = JSON.parse((await readSmallFile(lock)) ?? '') as Partial<Holder>;
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
