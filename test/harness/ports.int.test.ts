import { execFile } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { claimPort, freeLoopbackPort, PORT_CLAIMS_VARIABLE } from './ports.ts';

const run = promisify(execFile);

describe('loopback ports of a test run', () => {
  it('are claimed in the run-wide directory, once: neither this process nor another gets a claimed port again', async () => {
    const dir = process.env[PORT_CLAIMS_VARIABLE];
    expect(dir, `${PORT_CLAIMS_VARIABLE} is set by test/support/global-setup.ts for every worker`).toBeTruthy();
    expect((await stat(dir!)).isDirectory()).toBe(true);

    const port = await freeLoopbackPort();
    expect(await readFile(path.join(dir!, String(port)), 'utf8')).toBe(`${process.pid}\n`);
    expect(await claimPort(port)).toBe(false);

    // Another process of the run (another test file's worker) is refused the same port.
    const script = `import { claimPort } from ${JSON.stringify(path.resolve(import.meta.dirname, 'ports.ts'))};
      process.stdout.write(String(await claimPort(${port})));`;
    const other = await run(process.execPath, ['--input-type=module', '-e', script], { env: process.env });
    expect(other.stdout).toBe('false');
  });
});
