import { chmod, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

/**
 * A new directory under the OS temp dir, readable by all: the embedded PostgreSQL (as user
 * postgres) and nginx workers must traverse a directory made by root. The caller removes it.
 */
export async function makeTempDir(prefix = 'arkvory-'): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  await chmod(dir, 0o755);
  return dir;
}
