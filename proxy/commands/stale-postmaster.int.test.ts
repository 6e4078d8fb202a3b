/**
 * The admin commands find the embedded PostgreSQL of a running `npm start` by the port in its
 * postmaster.pid and log in with the superuser password. A postmaster.pid outlives a server that
 * did not stop (a power cut, SIGKILL): its port is then anyone's to listen on, and its process id
 * the system's to give to anything. A command must not send the password there: any local
 * account listening on that port asks for it in clear text (PostgreSQL's password message).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeTempDir, runCli } from '../../test/support/gateway.ts';
import { catchPasswords, type PasswordCatcher } from '../../test/support/password-catcher.ts';

const PASSWORD = 'stale-cluster-superuser-password-0123456789';

/** A data dir whose cluster left a postmaster.pid naming `pid` and `port` (PostgreSQL's layout). */
async function dataDirWithStalePid(pid: number, port: number): Promise<string> {
  const dataDir = await makeTempDir();
  const pgDir = path.join(dataDir, '.pg');
  await mkdir(pgDir, { mode: 0o700 });
  await writeFile(path.join(pgDir, 'PG_VERSION'), '18\n');
  await writeFile(
    path.join(pgDir, 'postmaster.pid'),
    [pid, pgDir, Math.floor(Date.now() / 1000) - 3600, port, '', '127.0.0.1', '  1234567  1', 'ready', ''].join('\n'),
  );
  await writeFile(path.join(dataDir, '.pg.password'), `${PASSWORD}\n`, { mode: 0o600 });
  return dataDir;
}

let catcher: PasswordCatcher | undefined;
afterEach(async () => {
  await catcher?.close();
  catcher = undefined;
});

describe('a postmaster.pid left by a cluster that is not running', () => {
  const exitedPid = () => {
    const child = spawnSync('true');
    return child.pid!;
  };
  // A process id no one holds any more, and one the system gave to another program (this test's).
  for (const [what, pid] of [
    ['names a process that is gone', exitedPid],
    ['names a process that is not the cluster', () => process.pid],
  ] as const) {
    it(`${what}: admin commands and doctor never send the password to its port`, async () => {
      catcher = await catchPasswords();
      const dataDir = await dataDirWithStalePid(pid(), catcher.port);
      const env = { ARKVORY_DATA_DIR: dataDir, ARKVORY_LOG_LEVEL: 'warn' };

      const list = await runCli(['principals', 'list'], env);
      const doctor = await runCli(['doctor'], env);
      expect(catcher.received()).not.toContain(PASSWORD);
      // Both say what is true: no gateway runs the embedded database.
      expect(list.code, list.stderr).toBe(1);
      expect(list.stderr).toContain('no embedded database is running');
      expect(doctor.stdout).toMatch(/^skip\s+database/m);
    });
  }
});

describe('a postmaster.pid naming a live process of the cluster whose port another account has taken', () => {
  // The server died between the check and the login: its process looked right, its port is the catcher's.
  it('admin commands and doctor refuse a server asking for the password in clear, and say so', async () => {
    catcher = await catchPasswords();
    const dataDir = await dataDirWithStalePid(0, catcher.port);
    const pgDir = path.join(dataDir, '.pg');
    // A process working in the cluster's directory, as its postmaster does.
    const postmaster = spawn('sleep', ['60'], { cwd: pgDir, stdio: 'ignore' });
    try {
      const pidFile = path.join(pgDir, 'postmaster.pid');
      const lines = (await readFile(pidFile, 'utf8')).split('\n');
      lines[0] = String(postmaster.pid);
      await writeFile(pidFile, lines.join('\n'));
      const env = { ARKVORY_DATA_DIR: dataDir, ARKVORY_LOG_LEVEL: 'warn' };

      const list = await runCli(['principals', 'list'], env);
      const doctor = await runCli(['doctor'], env);
      expect(catcher.received()).toContain('postgres'); // it was reached: the login began
      expect(catcher.received()).not.toContain(PASSWORD);
      expect(list.code, list.stderr).toBe(1);
      expect(list.stderr).toContain('require_auth');
      expect(doctor.stdout).toMatch(/^FAIL\s+database.*require_auth/m);
    } finally {
      postmaster.kill();
    }
  });
});
