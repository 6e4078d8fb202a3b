/**
 * One shell for both kinds of command: with the client's variables set (ARKVORY_URL, ARKVORY_KEY,
 * ARKVORY_KEY_FILE, ARKVORY_UPLOAD_STATE_DIR, as docs/clients.md says to), the server commands
 * (`serve`, `keys revoke`, …) run as real processes and the client commands reach the gateway they
 * started; a misspelt variable still stops the server.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { CLIENT_VARIABLE_NAMES } from '../../client/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli, startGateway } from '../../test/support/gateway.ts';
import { freeLoopbackPort } from '../../test/harness/index.ts';

describe('client and server variables in one shell', () => {
  const db = useTestDatabase();

  async function clientShell(): Promise<Record<string, string>> {
    const port = await freeLoopbackPort();
    const home = await makeTempDir('arkvory-shell-');
    const shell: Record<string, string> = {
      ARKVORY_DATABASE_URL: db.url,
      ARKVORY_PORT: String(port),
      ARKVORY_URL: `http://127.0.0.1:${port}`,
      ARKVORY_KEY: 'set before there is a key',
      ARKVORY_KEY_FILE: path.join(home, 'key'),
      ARKVORY_UPLOAD_STATE_DIR: path.join(home, 'uploads'),
    };
    // Every variable the client documents is set, so a new one cannot slip past this test.
    expect(CLIENT_VARIABLE_NAMES.filter((name) => !(name in shell))).toEqual([]);
    return shell;
  }

  it('should run serve, keys create and keys revoke with them set, and the client (put, presign) against that gateway', async () => {
    const shell = await clientShell();
    for (const args of [
      ['principals', 'create', 'carol'],
      ['repos', 'create', 'shell'],
      ['grants', 'add', 'carol', 'shell', 'write'],
    ]) {
      const r = await runCli(args, shell);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    const created = await runCli(['keys', 'create', 'carol', '--scopes', 'read,write'], shell);
    expect(created.code, created.stderr).toBe(0);
    const key = JSON.parse(created.stdout) as { key: string; keyId: string };
    await writeFile(shell.ARKVORY_KEY_FILE!, `${key.key}\n`);

    const gw = await startGateway({ env: shell });
    expect(gw.url).toBe(shell.ARKVORY_URL);
    const file = path.join(path.dirname(shell.ARKVORY_KEY_FILE!), 'a.bin');
    await writeFile(file, 'one shell\n');
    const put = await runCli(['put', file, 'shell/a.bin'], shell);
    expect(put.code, put.stderr).toBe(0);
    const linked = await runCli(['presign', 'shell', 'a.bin'], shell);
    expect(linked.code, linked.stderr).toBe(0);
    expect((JSON.parse(linked.stdout) as { url: string }).url.startsWith(gw.url)).toBe(true);

    const revoked = await runCli(['keys', 'revoke', key.keyId], shell);
    expect(revoked.code, revoked.stderr).toBe(0);
    // A revocation reaches a running gateway within 2 s (docs/auth.md).
    let refused = await runCli(['presign', 'shell', 'a.bin'], shell);
    for (const deadline = Date.now() + 10_000; refused.code === 0 && Date.now() < deadline; await sleep(250))
      refused = await runCli(['presign', 'shell', 'a.bin'], shell);
    expect([refused.code, refused.stderr]).toEqual([1, expect.stringMatching(/^arkvory: unauthorized: /)]);
  });

  it('should still refuse a misspelt variable beside them: serve exits 2 naming only the typo', async () => {
    const shell = await clientShell();
    const gw = await startGateway({ env: { ...shell, ARKVORY_URLS: shell.ARKVORY_URL! }, waitFor: 'none' });
    expect(await gw.exited).toBe(2);
    expect(gw.logs()).toContain('ARKVORY_URLS: unknown variable');
    for (const name of CLIENT_VARIABLE_NAMES) expect(gw.logs()).not.toContain(`${name}: `);
  });
});
