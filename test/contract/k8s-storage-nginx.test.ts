/**
 * The Kubernetes example's storage sidecar, run by a real nginx the way its pod runs it: the
 * ConfigMap's nginx.conf and the container's command, as the pod's user with every capability
 * dropped and no new privileges (setpriv), its volumes at directories of the test (each mount path
 * moved there, the listen port a free one). It must start and serve a file the gateway wrote (owned
 * by the pod's user, mode 0640) with nothing writable but its own writable volume, and to the pod
 * alone: on loopback, never on an address other pods reach.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdir, readFile, writeFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { freeLoopbackPort } from '../harness/ports.ts';
import { randomContent, request } from '../support/content.ts';
import { DEPLOY } from '../support/deploy-files.ts';
import { makeTempDir } from '../support/gateway.ts';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
let child: ChildProcess | undefined;

afterEach(async () => {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child!.once('exit', r));
  child.kill('SIGTERM');
  await exited;
});

it('the storage container nginx starts as the pod user without capabilities and serves the shared volume', async () => {
  expect(NGINX, 'nginx is not installed; on Debian: apt-get install -y nginx-light').toBeDefined();
  expect(process.getuid?.(), 'runs as root: it switches to the pod user with setpriv').toBe(0);
  const objects = parseAllDocuments(await readFile(path.join(DEPLOY, 'k8s/arkvory-sidecar.yaml'), 'utf8')).map(
    (d) => d.toJS() as { kind: string; metadata: { name: string }; spec: any; data?: Record<string, string> },
  );
  const pod = objects.find((o) => o.kind === 'Deployment')!.spec.template.spec;
  const storage = (pod.containers as Array<any>).find((c) => c.name === 'storage')!;
  const uid: number = storage.securityContext?.runAsUser ?? pod.securityContext.runAsUser;
  const gid: number = storage.securityContext?.runAsGroup ?? pod.securityContext.runAsGroup;
  const [program, ...args] = storage.command as string[];
  expect(program).toBe('nginx');

  // Each volume of the container at a directory of the test: the pod user's, as the kubelet makes
  // an emptyDir (and the gateway the shared volume); the ConfigMap's files readable.
  const base = await makeTempDir('arkvory-k8s-nginx-');
  await chmod(base, 0o755);
  const moved = new Map<string, string>();
  for (const mount of storage.volumeMounts as Array<{ name: string; mountPath: string }>) {
    const dir = path.join(base, mount.name);
    await mkdir(dir);
    const volume = (pod.volumes as Array<any>).find((v) => v.name === mount.name)!;
    if (volume.configMap) {
      const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume.configMap.name)!;
      for (const [file, text] of Object.entries(configMap.data!)) await writeFile(path.join(dir, file), text);
      await chmod(dir, 0o755);
    } else {
      await chown(dir, uid, gid);
      await chmod(dir, 0o750);
    }
    moved.set(mount.mountPath, dir);
  }
  const at = (p: string) => {
    for (const [mountPath, dir] of moved)
      if (p === mountPath || p.startsWith(`${mountPath}/`)) return dir + p.slice(mountPath.length);
    return p;
  };
  const port = await freeLoopbackPort();
  const confArg = args.indexOf('-c') + 1;
  const confFile = at(args[confArg]!);
  const conf = (await readFile(confFile, 'utf8'))
    .replace(/(\s)(\/\S+);/g, (_, space: string, p: string) => `${space}${at(p)};`)
    .replace(/listen ((?:\S+:)?)\d+;/, (_, address: string) => `listen ${address}${port};`);
  await writeFile(confFile, conf);

  // A blob as the gateway leaves it: owned by the pod user, not readable by others.
  const root = /^\s*root (\S+);$/m.exec(conf)![1]!;
  const body = randomContent(32 * 1024);
  await mkdir(path.join(root, 'blobs'));
  await writeFile(path.join(root, 'blobs', 'b1'), body);
  for (const [p, mode] of [
    [path.join(root, 'blobs'), 0o750],
    [path.join(root, 'blobs', 'b1'), 0o640],
  ] as const) {
    await chown(p, uid, gid);
    await chmod(p, mode);
  }

  // Its output goes to a file of the pod user, as a runtime gives a container's (nginx reopens
  // /dev/stdout, which a socket, what node's pipes are, refuses).
  const log = path.join(base, 'container.log');
  const logFd = openSync(log, 'w');
  await chown(log, uid, gid);
  const output = () => readFileSync(log, 'utf8');
  child = spawn(
    'setpriv',
    [
      `--reuid=${uid}`,
      `--regid=${gid}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      NGINX!,
      ...args.map((a, i) => (i === confArg ? confFile : a)),
    ],
    { stdio: ['ignore', logFd, logFd] },
  );
  closeSync(logFd);
  const deadline = Date.now() + 15_000;
  for (;;) {
    const got = await request(`http://127.0.0.1:${port}/blobs/b1`).catch(() => undefined);
    if (got) {
      expect(got.status, output()).toBe(200);
      expect(got.body.equals(body)).toBe(true);
      break;
    }
    expect(child.exitCode, `nginx exited: ${output()}`).toBeNull();
    expect(Date.now(), `nginx did not answer: ${output()}`).toBeLessThan(deadline);
    await new Promise((r) => setTimeout(r, 50));
  }
  // Nothing but the pod reaches it: it serves every blob without a key, and every pod of the
  // cluster reaches the pod's own address (here: one of this host's that is not loopback).
  const elsewhere =
    Object.values(networkInterfaces())
      .flat()
      .find((a) => a !== undefined && !a.internal && a.family === 'IPv4')?.address ?? '127.0.0.2';
  const outside = await request(`http://${elsewhere}:${port}/blobs/b1`).then(
    (r) => `answered ${r.status}`,
    (err: NodeJS.ErrnoException) => err.code,
  );
  expect(outside, `${elsewhere}:${port}`).toBe('ECONNREFUSED');
  expect(output()).not.toMatch(/\[(emerg|alert|crit)\]/);
});
