/**
 * The setup file of the projects whose files share a worker's module graph (vitest.config.ts):
 * vitest evaluates it again for each test file, so the support modules' clean-ups (file-end.ts)
 * end every file, whichever file first imported them. Registered before the file's own hooks, so
 * they run after them.
 */
import { afterAll, afterEach } from 'vitest';
import { runFileEnds, runTestEnds } from './file-end.ts';

afterEach(runTestEnds);
afterAll(runFileEnds);
