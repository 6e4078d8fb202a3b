/**
 * Scrub over a real directory store whose blob names hold things other than blobs (planted by a
 * mistake or a co-tenant of the host): each is quarantined, none waited on or read without end.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, mkdir, mkdtemp, open, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import { blobRelativePath } from '../paths.ts';
import { scrubBlobs } from './scrub.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

async function place(root: string, name: string): Promise<string> {
  const file = path.join(root, blobRelativePath(name));
  await mkdir(path.dirname(file), { recursive: true });
  return file;
}

describe('scrub', () => {
  it('quarantines a named pipe and a link to /dev/zero under blob names, without waiting on or reading them, and keeps a good blob', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'arkvory-scrub-'));
    dirs.push(root);
    const good = Buffer.from('the bytes of a good blob');
    await writeFile(await place(root, sha256(good)), good);
    const pipeName = sha256(Buffer.from('a pipe'));
    const pipe = await place(root, pipeName);
    await promisify(execFile)('mkfifo', [pipe]);
    // A read the old code left waiting on the pipe is let go (an open for writing ends its wait).
    onTestFinished(async () => {
      const writer = await open(pipe, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
      await writer?.close();
    });
    const zeroName = sha256(Buffer.from('endless zeros'));
    await symlink('/dev/zero', await place(root, zeroName));

    const timedOut = new Promise<'timed out'>((resolve) => setTimeout(() => resolve('timed out'), 3000).unref());
    const report = await Promise.race([scrubBlobs(root, { nowMs: () => 1 }), timedOut]);
    expect(report).not.toBe('timed out');
    if (report === 'timed out') return;
    expect(report.checked).toBe(3);
    expect(report.corrupt.map((c) => c.blob).sort()).toEqual([pipeName, zeroName].sort());
    const quarantined = await readdir(path.join(root, 'quarantine'));
    expect(quarantined.sort()).toEqual([`${pipeName}.1`, `${zeroName}.1`].sort());
    // Moved as they are (the link itself, not what it points at).
    expect((await lstat(path.join(root, 'quarantine', `${zeroName}.1`))).isSymbolicLink()).toBe(true);
    expect((await lstat(path.join(root, blobRelativePath(sha256(good))))).isFile()).toBe(true);
  });
});
