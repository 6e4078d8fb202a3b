/** The CLI against its documentation: every command in the README table, usage lines, every role in `serve --help`. */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { COMMANDS } from '../../proxy/commands/index.ts';
import { VARIABLES } from '../../proxy/config/config.ts';
import { README } from '../support/readme-tables.ts';
import { runCli } from '../support/gateway.ts';

describe('CLI contract', () => {
  it('the README CLI table has a row for every command, and no row for a command that does not exist', async () => {
    const readme = await readFile(README, 'utf8');
    const table = readme.slice(readme.indexOf('## CLI'), readme.indexOf('## Configuration'));
    const rows = [...table.matchAll(/^\| `arkvory ([a-z-]+)/gm)].map((m) => m[1]!);
    expect(new Set(rows)).toEqual(new Set(COMMANDS.map((c) => c.name)));
  });

  it('every command has a summary and a usage text that starts with its usage line', () => {
    for (const c of COMMANDS) {
      expect(c.summary.length, c.name).toBeGreaterThan(10);
      expect(c.usage, c.name).toMatch(new RegExp(`^Usage:(\\s+arkvory ${c.name}\\b|\\n  arkvory ${c.name}\\b)`));
    }
  });

  it('serve --help names every role ARKVORY_ROLE accepts', async () => {
    const role = VARIABLES.find((v) => v.name === 'ARKVORY_ROLE')!;
    const values = (role.kind as { values: readonly string[] }).values;
    const help = await runCli(['serve', '--help'], {});
    expect(help.code).toBe(0);
    for (const value of values) expect(help.stdout).toContain(value);
    expect(help.stdout).toContain('rules-service');
  });

  it('doctor --help starts with its usage line', async () => {
    const help = await runCli(['doctor', '--help'], {});
    expect(help.stdout.startsWith('Usage: arkvory doctor')).toBe(true);
  });
});
