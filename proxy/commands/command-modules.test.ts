/** A CLI run finds its command through the table of modules, not the table of every command. */
import { describe, expect, it } from 'vitest';
import { COMMAND_MODULES, loadCommand } from './command-modules.ts';
import { COMMANDS } from './index.ts';

describe('the command modules', () => {
  it('name every command once, each loading the command of its name', async () => {
    expect(Object.keys(COMMAND_MODULES).sort()).toEqual(COMMANDS.map((c) => c.name).sort());
    for (const command of COMMANDS) expect(await loadCommand(command.name)).toBe(command);
  });

  it.each(['nope', 'toString', '__proto__', 'constructor'])('know no command "%s"', (name) => {
    expect(loadCommand(name)).toBeUndefined();
  });
});
