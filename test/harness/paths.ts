/** Where things are, for tests, benchmarks, chaos and host scripts alike (no vitest in test/harness/). */
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root directory. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** The CLI entry every spawned gateway runs. */
export const ARKVORY_BIN = path.join(REPO_ROOT, 'bin/arkvory.js');
