/**
 * The multi-host suite never skips silently: without root it fails with a message saying so.
 * As root, the check runs in a child process as user `nobody`.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/index.ts';
import { requireHostTools } from './netns.ts';

const NEEDS_REPO_ROOT = /needs root; run it as root/;

describe('npm run test:hosts without root', () => {
  it('fails with a message saying it needs root', () => {
    if (process.getuid?.() !== 0) {
      expect(() => requireHostTools()).toThrow(NEEDS_REPO_ROOT);
      return;
    }
    const child = spawnSync(
      'setpriv',
      [
        '--reuid=nobody',
        '--regid=nogroup',
        '--clear-groups',
        '--',
        process.execPath,
        '-e',
        "import('./test/hosts/netns.ts').then((m) => m.requireHostTools()).catch((e) => { console.error(e.message); process.exit(3); })",
      ],
      { cwd: REPO_ROOT, encoding: 'utf8' },
    );
    expect(child.status, child.stderr).toBe(3);
    expect(child.stderr).toMatch(NEEDS_REPO_ROOT);
  });
});
