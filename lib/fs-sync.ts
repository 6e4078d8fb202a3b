import { open } from 'node:fs/promises';

/** fsync of a directory, so a rename/link/unlink inside it survives a power cut. */
export async function fsyncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
