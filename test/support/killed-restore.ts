/** A restore killed part-way at a known point: for tests of what such a restore leaves behind. */
import { execFile, spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { open, rm } from 'node:fs/promises';
import { promisify } from 'node:util';
import { processEnv } from '../harness/index.ts';
import { CLI, ROOT } from './gateway.ts';

/**
 * Replaces the blob file `blob` of the backup copy `held` with a named pipe, runs `arkvory restore
 * held` with `env`, and kills it with SIGKILL once it opens that blob (opening the pipe for writing
 * returns then). Throws if the restore ends before reading it.
 */
export async function killRestoreAtBlob(held: string, blob: string, env: Record<string, string>): Promise<void> {
  await rm(blob);
  await promisify(execFile)('mkfifo', [blob]);
  const child = spawn(process.execPath, [CLI, 'restore', held], { cwd: ROOT, env: processEnv(env), stdio: 'ignore' });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const writing = open(blob, 'w');
  const first = await Promise.race([writing.then(() => 'reading' as const), exited.then(() => 'exited' as const)]);
  if (first === 'exited') {
    // Let the pending open of the pipe finish, then fail.
    await (await open(blob, constants.O_RDONLY | constants.O_NONBLOCK)).close();
    await (await writing).close();
    throw new Error('the restore exited before it read the blob');
  }
  child.kill('SIGKILL');
  await exited;
  await (await writing).close();
}
