/**
 * The embedded PostgreSQL's superuser password, on a first start: initdb reads it from a file, and
 * that file must never be readable by anyone but the gateway (and PostgreSQL's own user). A
 * superuser password any local account could read opens the whole database on 127.0.0.1 to it. The
 * processes run for it (initdb, the server) get none of the gateway's variables: they run as another
 * account when the gateway is root, which could read them in /proc/<pid>/environ. A first start
 * killed while initdb makes the cluster (an OOM kill, a container stopped past its grace period)
 * leaves no cluster directory that every later start would take for a cluster and fail on.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, watch } from 'node:fs';
import { readdir, readFile, readlink, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { waitUntil } from '../../test/harness/index.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';
import { catchPasswords } from '../../test/support/password-catcher.ts';

/** The processes working in `dataDir`: initdb (named by its --pgdata) and the postgres it runs there (its cwd). */
async function processesIn(dataDir: string): Promise<number[]> {
  const found: number[] = [];
  for (const name of await readdir('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    const [cmdline, cwd] = await Promise.all([
      readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''),
      readlink(`/proc/${pid}/cwd`).catch(() => ''),
    ]);
    if (cmdline.includes(dataDir) || cwd === dataDir || cwd.startsWith(`${dataDir}/`)) found.push(pid);
  }
  return found;
}

/** Whether initdb has begun writing a cluster under `dataDir` (its PG_VERSION is among its first files). */
async function initdbUnderway(dataDir: string): Promise<boolean> {
  if (existsSync(path.join(dataDir, '.pg', 'PG_VERSION'))) return true;
  for (const entry of await readdir(dataDir).catch(() => [])) {
    if (!entry.startsWith('.pg-init-')) continue;
    for (const inner of await readdir(path.join(dataDir, entry)).catch(() => []))
      if (existsSync(path.join(dataDir, entry, inner, 'PG_VERSION'))) return true;
  }
  return false;
}

/** A first start on `dataDir` killed with initdb while initdb writes the cluster, as a cgroup is killed. */
async function killFirstStartDuringInitdb(dataDir: string): Promise<void> {
  const first = await startGateway({ dataDir, waitFor: 'none' });
  await waitUntil(() => initdbUnderway(dataDir), { what: 'initdb to begin', timeoutMs: 30_000, intervalMs: 2 });
  await first.stop('SIGKILL');
  for (const pid of await processesIn(dataDir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  await waitUntil(async () => (await processesIn(dataDir)).length === 0, { what: 'initdb to be gone' });
}

describe('a first start on the embedded default', () => {
  it('after one killed while initdb ran, makes the cluster afresh and hands initdb its password in no file that group or others can reach', async () => {
    // The temp directory the gateway's process sees (os.tmpdir()), watched for whatever lands there.
    const tmp = await makeTempDir('arkvory-tmpdir-');
    const dataDir = await makeTempDir();
    // Bootstrap well under way: the killed initdb had written PG_VERSION, which a start took for a cluster.
    await killFirstStartDuringInitdb(dataDir);
    const seen: Array<{ name: string; mode: number }> = [];
    const watchers = [tmp, dataDir].map((dir) =>
      watch(dir, (_event, name) => {
        if (name === null) return;
        stat(path.join(dir, name)).then(
          (s) => seen.push({ name, mode: s.mode & 0o777 }),
          () => {},
        );
      }),
    );
    try {
      const gw = await startGateway({ env: { TMPDIR: tmp }, dataDir, timeoutMs: 60_000 });
      expect((await fetch(`${gw.url}/health/live`)).status).toBe(200);
      const password = (await readFile(path.join(gw.dataDir, '.pg.password'), 'utf8')).trim();
      expect(password.length).toBeGreaterThan(20);
      // What reached the shared temp directory while initdb ran: nothing anyone else may read.
      expect(seen.filter((f) => f.name.startsWith('pg-password-') && (f.mode & 0o077) !== 0)).toEqual([]);
      // Where it went instead: a directory of the data dir that no one else can list, gone after
      // (and the one the killed start left, with its half-made cluster, too).
      expect(seen.filter((f) => f.name.startsWith('.pg-init-') && (f.mode & 0o066) !== 0)).toEqual([]);
      expect((await readdir(dataDir)).filter((name) => name.startsWith('.pg-init-'))).toEqual([]);
    } finally {
      for (const watcher of watchers) watcher.close();
    }
  });
});

describe('the embedded PostgreSQL server process', () => {
  it("is given none of the gateway's secrets in its environment (it runs as another account when we are root)", async () => {
    const token = `metrics-token-${Date.now()}`;
    const s3Secret = `s3-secret-${Date.now()}`;
    const gw = await startGateway({
      env: { ARKVORY_METRICS_TOKEN: token, AWS_SECRET_ACCESS_KEY: s3Secret },
      timeoutMs: 60_000,
    });
    const pid = Number((await readFile(path.join(gw.dataDir, '.pg', 'postmaster.pid'), 'utf8')).split('\n')[0]);
    const environ = await readFile(`/proc/${pid}/environ`, 'utf8');
    // The server itself runs with what it needs (its messages in English: readiness is read from them).
    expect(environ.split('\0')).toContain('LC_MESSAGES=C');
    expect(environ).not.toContain(token);
    expect(environ).not.toContain(s3Secret);
  });
});

interface SeenProcess {
  readonly command: string;
  readonly environ: readonly string[];
}

/**
 * Watches /proc, until stopped, for the processes creating the cluster under `dataDir`: initdb (named by
 * its --pgdata, a directory there that becomes `.pg` once whole) and what it runs (the bootstrap postgres, through a shell), each environment read
 * while the process ran. initdb runs for half a second or more, many times this loop's round.
 */
function watchClusterCreation(dataDir: string): { stop(): Promise<SeenProcess[]> } {
  const tree = new Set<number>();
  const seen = new Map<number, SeenProcess>();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      for (const name of await readdir('/proc')) {
        const pid = Number(name);
        if (!Number.isInteger(pid) || seen.has(pid)) continue;
        const [cmdline, statLine] = await Promise.all([
          readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''),
          readFile(`/proc/${pid}/stat`, 'utf8').catch(() => ''),
        ]);
        const ppid = Number(statLine.slice(statLine.lastIndexOf(')') + 2).split(' ')[1]);
        const args = cmdline.split('\0');
        if (!args.some((a) => a.startsWith(`--pgdata=${dataDir}/`)) && !tree.has(ppid)) continue;
        const environ = await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '');
        if (environ === '') continue; // gone, or not yet readable: looked at again next round
        tree.add(pid);
        seen.set(pid, { command: path.basename(args[0] ?? ''), environ: environ.split('\0') });
      }
      await sleep(2);
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return [...seen.values()];
    },
  };
}

describe('creating the embedded PostgreSQL cluster', () => {
  it("runs initdb, what initdb runs and `locale` with none of the gateway's secrets in their environment", async () => {
    const token = `metrics-token-${Date.now()}`;
    const s3Secret = `s3-secret-${Date.now()}`;
    // `locale -a` (the message locale's choice) runs through PATH: a `locale` first on it records its environment.
    const bin = await makeTempDir('arkvory-locale-');
    const localeEnv = path.join(bin, 'locale.env');
    const realLocale = execFileSync('sh', ['-c', 'command -v locale || true'], { encoding: 'utf8' }).trim();
    await writeFile(
      path.join(bin, 'locale'),
      `#!/bin/sh\nenv > '${localeEnv}'\n${realLocale ? `exec '${realLocale}' "$@"` : 'exit 1'}\n`,
      { mode: 0o755 },
    );
    const dataDir = await makeTempDir();
    const watcher = watchClusterCreation(dataDir);
    let seen: SeenProcess[];
    try {
      await startGateway({
        env: { ARKVORY_METRICS_TOKEN: token, AWS_SECRET_ACCESS_KEY: s3Secret, PATH: `${bin}:${process.env.PATH}` },
        dataDir,
        timeoutMs: 60_000,
      });
    } finally {
      seen = await watcher.stop();
    }
    const recorded = await readFile(localeEnv, 'utf8');
    expect(recorded).toContain(`PATH=${bin}:`);
    expect(recorded).not.toContain(token);
    expect(recorded).not.toContain(s3Secret);
    // initdb was seen running, with what it needs (its messages' locale).
    // (A child caught between its fork and its exec still shows initdb's command line: more than one may be seen.)
    const initdb = seen.filter((p) => p.command === 'initdb');
    expect(initdb.length).toBeGreaterThan(0);
    expect(initdb[0]!.environ.some((v) => v.startsWith('LC_MESSAGES='))).toBe(true);
    for (const p of seen) {
      expect(
        p.environ.filter((v) => v.includes(token) || v.includes(s3Secret)),
        p.command,
      ).toEqual([]);
    }
  });
});

describe('an embedded PostgreSQL that exits while the gateway runs', () => {
  it('gets the gateway to stop, and its port, taken by another account, never the password', async () => {
    const gw = await startGateway({ timeoutMs: 60_000 });
    const key = (await readFile(path.join(gw.dataDir, 'admin.key'), 'utf8')).trim();
    const password = (await readFile(path.join(gw.dataDir, '.pg.password'), 'utf8')).trim();
    const [pid, , , port] = (await readFile(path.join(gw.dataDir, '.pg', 'postmaster.pid'), 'utf8')).split('\n');
    const principals = () =>
      fetch(`${gw.url}/api/v1/admin/principals`, { headers: { authorization: `Bearer ${key}` } }).then(
        (r) => r.status,
        () => 0,
      );
    expect(await principals()).toBe(200);
    // Killed (the OOM killer, a crash): its port is free for anyone to listen on.
    process.kill(Number(pid), 'SIGKILL');
    const catcher = await catchPasswords(Number(port), 10_000);
    try {
      // Requests that need the database, while the gateway still answers.
      for (let i = 0; i < 10 && gw.isRunning(); i++) {
        await principals();
        await sleep(200);
      }
      const code = await Promise.race([gw.exited, sleep(40_000).then(() => 'still running')]);
      expect(catcher.received()).not.toContain(password);
      expect(code).toBe(1);
      expect(gw.logs()).toContain('"code":"embedded_database_lost"');
    } finally {
      await catcher.close();
    }
  });
});
