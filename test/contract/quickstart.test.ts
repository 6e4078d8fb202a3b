/**
 * The README's first-hour walk-through, executed command by command on a fresh data dir: each line of
 * its `sh` blocks between the quickstart markers runs in bash and must exit 0. Three substitutions keep
 * it off the shared checkout: `data/` becomes a fresh temp data dir (also ARKVORY_DATA_DIR), port 8080 a
 * free port (also ARKVORY_PORT), and `npm …` runs with `--prefix <checkout>` from a temp working dir.
 * `npm start` lines start the gateway in the background (its own process group), stopping the previous one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { burstBytes } from '../../policy/bandwidth/token-bucket.ts';
import { makeTempDir, ROOT } from '../support/gateway.ts';
import { README } from '../support/readme-tables.ts';
import { freeLoopbackPort } from '../harness/index.ts';

/** The quick start's commands, in order; comment lines dropped. */
export function quickstartCommands(readme: string): string[] {
  const start = readme.indexOf('<!-- quickstart:start -->');
  const end = readme.indexOf('<!-- quickstart:end -->');
  if (start < 0 || end < start) throw new Error('README has no quickstart section');
  const commands: string[] = [];
  for (const block of readme.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)) {
    for (const line of block[1]!.split('\n'))
      if (line.trim() !== '' && !line.trim().startsWith('#')) commands.push(line);
  }
  return commands;
}

let gateway:
  | { child: ChildProcess; exited: Promise<unknown>; output: () => string; port: number; dataDir: string }
  | undefined;

/**
 * SIGTERM to the whole group (bash, npm, the gateway); resolves once the port is free and the
 * embedded PostgreSQL has stopped (npm may exit before the gateway it started has finished).
 */
async function stopGateway(): Promise<void> {
  if (!gateway) return;
  const { child, exited, port, dataDir } = gateway;
  gateway = undefined;
  if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGTERM');
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // already gone
    }
  }, 30_000);
  await exited;
  clearTimeout(timer);
  for (let i = 0; i < 300; i++) {
    const free = await fetch(`http://127.0.0.1:${port}/health/live`).then(
      () => false,
      () => true,
    );
    if (free && !existsSync(path.join(dataDir, '.pg', 'postmaster.pid'))) return;
    await sleep(100);
  }
  throw new Error('the quick-start gateway did not stop within 30 s');
}

afterAll(async () => {
  await stopGateway();
});

describe('README quick start', () => {
  it('runs command by command on a fresh data dir: ready, doctor, a 404 before the grant, upload, Range, resume, backup, a ceiling', async () => {
    const commands = quickstartCommands(await readFile(README, 'utf8'));
    expect(commands.length).toBeGreaterThan(10);
    const work = await makeTempDir('arkvory-quickstart-');
    const dataDir = path.join(work, 'data');
    const port = await freeLoopbackPort();
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      LANG: 'C.UTF-8',
      ARKVORY_DATA_DIR: dataDir,
      ARKVORY_PORT: String(port),
      ARKVORY_LOG_LEVEL: 'info',
    };
    const adapt = (line: string) =>
      line
        .replaceAll('data/', `${dataDir}/`)
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${port}`)
        .replace(/\bnpm (?!--prefix)/g, `npm --prefix '${ROOT}' `);
    // The first `npm start` is in the block above the section (with npm ci, which the suite itself ran).
    const all = ['npm start', ...commands];
    const assignments: string[] = [];
    const outputs: Array<{ command: string; stdout: string }> = [];
    for (const line of all) {
      const command = adapt(line);
      if (/(^|\s)npm --prefix '[^']+' start$/.test(command)) {
        await stopGateway();
        const child = spawn('bash', ['-c', command], {
          cwd: work,
          env,
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let output = '';
        child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
        child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
        const exited = new Promise((resolve) => child.on('exit', resolve));
        gateway = { child, exited, output: () => output, port, dataDir };
        for (let i = 0; ; i++) {
          const status = await fetch(`http://127.0.0.1:${port}/health/status`).then(
            (r) => r.status,
            () => 0,
          );
          if (status === 200) break;
          if (child.exitCode !== null || i > 1200) throw new Error(`\`${line}\` did not come up:\n${output}`);
          await sleep(50);
        }
        continue;
      }
      const isAssignment = /^[A-Z_]+=/.test(line) && !line.includes(' npm ');
      const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn('bash', ['-eo', 'pipefail', '-c', [...assignments, command].join('\n')], {
          cwd: work,
          env,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
      expect(
        result.code,
        `\`${line}\` failed:\n${result.stdout}${result.stderr}\ngateway:\n${gateway?.output() ?? ''}`,
      ).toBe(0);
      if (isAssignment) assignments.push(command);
      outputs.push({ command: line, stdout: result.stdout });
    }
    const out = (fragment: string) => outputs.find((o) => o.command.includes(fragment))!.stdout;
    expect(JSON.parse(out('/health/ready'))).toMatchObject({ role: 'api', writable: true });
    expect(out('arkvory -- doctor')).toMatch(/^ok {3}database: .*embedded/m);
    expect(out("-w '%{http_code}")).toBe('404\n');
    expect(JSON.parse(out('curl -fsS -H "$AUTH" -T demo.bin'))).toMatchObject({ sizeBytes: 2_000_000 });
    expect(JSON.parse(out('arkvory -- backup'))).toMatchObject({ blobs: { count: 1, bytes: 2_000_000 } });
    expect(JSON.parse(out('restore --verify'))).toMatchObject({ ok: true, checked: 1 });
    // The ceiling: bytes ≤ rate × t + burst, so the measured speed stays under rate × size / (size − burst).
    const rate = 1048576;
    const speed = Number(/^([\d.]+) bytes\/s$/.exec(out('speed_download').trim())![1]);
    expect(speed).toBeGreaterThan(0);
    expect(speed).toBeLessThanOrEqual((rate * 2_000_000) / (2_000_000 - burstBytes(rate)));
    expect(gateway!.output()).toContain('ceilings: downloads no ceiling (1 MiB/s per principal)');
    await stopGateway();
  }, 240_000);
});
