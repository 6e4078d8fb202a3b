import { mkdir, open } from 'node:fs/promises';
import path from 'node:path';

/** fsync of a directory, so a rename/link/unlink inside it survives a power cut. */
export async function fsyncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Creates `dir` with parents (up to `stopAt`, which exists); fsyncs each new directory's parent so
 * the entries survive a power cut like the files later made in them. `sync` is injectable for tests.
 */
export async function mkdirDurable(
  dir: string,
  stopAt: string,
  sync: (dir: string) => Promise<void> = fsyncDirectory,
): Promise<void> {
  const first = await mkdir(dir, { recursive: true });
  if (first === undefined) return;
  for (let d = dir; ; d = path.dirname(d)) {
    await sync(path.dirname(d));
    if (d === first || path.dirname(d) === stopAt || d === path.dirname(d)) break;
  }
}
