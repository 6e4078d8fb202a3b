/**
 * The image as a container runtime would run it, on a machine kind where podman cannot start one
 * (the sandbox refuses the runtime's setrlimit): the image archive is read with skopeo and unpacked
 * with umoci; each container is a new mount and PID namespace (`unshare`) whose root is the
 * unpacked rootfs bind-mounted read-only, with /proc, a /dev of the usual devices, a tmpfs on /tmp
 * and the given volumes, running the image's entrypoint and command as the image's user, with its
 * environment and working directory, all read from the runtime config umoci derives from the image.
 * The network is the host's (podman --network host). With ARKVORY_IMAGE_RUNTIME=podman the same
 * containers are started with `podman run` instead. Registers no vitest hooks.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { exitedWithOutput, runProcess } from '../harness/index.ts';

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const BUILD_SCRIPT = path.join(ROOT, 'deploy/container/build.sh');

export interface BuildInfo {
  image: string;
  digest: string;
  revision: string;
  uncompressedBytes: number;
  compressedBytes: number;
  sizes: Record<string, number>;
  sbomPackages: number;
  buildSeconds: number;
}

export interface ImageBuild {
  archive: string;
  sbom: string;
  info: BuildInfo;
  /** What the build printed (its size table; "cached" when its inputs were unchanged). */
  output: string;
}

/**
 * Runs deploy/container/build.sh (reusing a cached build of the same inputs) into `outDir`, niced:
 * the image files run beside the other suites, and a cold build should take the CPU they leave idle
 * rather than stretch their timing bounds.
 */
export async function buildImage(outDir: string, env: NodeJS.ProcessEnv = process.env): Promise<ImageBuild> {
  const result = await runProcess('nice', ['-n', '10', 'bash', BUILD_SCRIPT, '--out', outDir], { env, cwd: ROOT });
  if (result.code !== 0) throw new Error(`build.sh exited ${result.code}:\n${result.stdout}\n${result.stderr}`);
  const info = JSON.parse(await readFile(path.join(outDir, 'build-info.json'), 'utf8')) as BuildInfo;
  const version = info.image.split(':').at(-1)!;
  return {
    archive: path.join(outDir, `arkvory-${version}.oci.tar`),
    sbom: path.join(outDir, `arkvory-${version}.spdx.json`),
    info,
    output: result.stdout,
  };
}

/** The parts of the OCI image config the tests check. */
export interface ImageConfig {
  config: {
    User: string;
    Entrypoint: string[];
    Cmd: string[];
    Env: string[];
    WorkingDir: string;
    Labels: Record<string, string>;
    Volumes: Record<string, object>;
    StopSignal?: string;
  };
  created: string;
}

export interface UnpackedImage {
  /** The image's root filesystem, shared read-only by every container started from it. */
  rootfs: string;
  image: ImageConfig;
  /** What a runtime runs: the entrypoint plus the command, as the user, in the directory, with the env. */
  process: { args: string[]; env: string[]; cwd: string; user: { uid: number; gid: number } };
}

async function must(command: string, args: string[]): Promise<string> {
  const result = await runProcess(command, args);
  if (result.code !== 0) throw new Error(`${command} ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
  return result.stdout;
}

/** skopeo reads the archive as podman load would; umoci unpacks it with the image's owners. */
export async function unpackImage(archive: string, dir: string): Promise<UnpackedImage> {
  const layout = path.join(dir, 'layout');
  const bundle = path.join(dir, 'bundle');
  await mkdir(dir, { recursive: true });
  await must('skopeo', ['copy', '--quiet', `oci-archive:${archive}`, `oci:${layout}:image`]);
  await must('umoci', ['unpack', '--image', `${layout}:image`, bundle]);
  const runtime = JSON.parse(await readFile(path.join(bundle, 'config.json'), 'utf8')) as {
    process: { args: string[]; env: string[]; cwd: string; user: { uid: number; gid: number } };
  };
  const blob = (digest: string) => readFile(path.join(layout, 'blobs', ...digest.split(':')), 'utf8');
  const index = JSON.parse(await readFile(path.join(layout, 'index.json'), 'utf8')) as {
    manifests: Array<{ digest: string }>;
  };
  const manifest = JSON.parse(await blob(index.manifests[0]!.digest)) as { config: { digest: string } };
  const image = JSON.parse(await blob(manifest.config.digest)) as ImageConfig;
  const { args, env, cwd, user } = runtime.process;
  return {
    rootfs: path.join(bundle, 'rootfs'),
    image,
    process: { args, env, cwd, user: { uid: user.uid, gid: user.gid } },
  };
}

export interface ContainerOptions {
  /** Added to (and overriding) the image's environment, like `podman run -e`. */
  env?: Record<string, string>;
  /** Host directory → path in the container, read-write (`podman run -v`). */
  volumes?: Record<string, string>;
  /** Replaces the image's command (not its entrypoint). */
  command?: string[];
}

export interface Container {
  readonly child: ChildProcess;
  /** Exit code of the container (its PID 1), or the signal that ended it. */
  readonly exited: Promise<number | string>;
  logs(): string;
  logLines(): Array<Record<string, unknown>>;
  /** Host PID of the container's PID 1 (tini). */
  pid1(): Promise<number>;
  /** Host PIDs of PID 1's children (the gateway). */
  children(pid: number): Promise<number[]>;
  /** `podman stop`: the signal to PID 1. */
  signal(signal: NodeJS.Signals): Promise<void>;
  /** Ends the container at once: SIGKILL to its PID 1 ends its whole PID namespace. */
  kill(): Promise<void>;
}

/** Mounts as a runtime would, then execs the image's process under its user in the new root. */
const SETUP = `
set -eu
R=$1; shift
mount --bind "$R" "$R"
mount -o remount,bind,ro "$R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs "$R/dev"
for d in null zero full random urandom; do : >"$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$R/tmp"
while [ "$1" != -- ]; do mount --bind "$1" "$R$2"; shift 2; done
shift
exec "$@"
`;

/**
 * The runtime: by default the namespaces above; with ARKVORY_IMAGE_RUNTIME=podman, `podman run` of
 * the loaded archive (where podman can start containers; not on the machine kind CI runs on).
 */
export const RUNTIME = process.env.ARKVORY_IMAGE_RUNTIME === 'podman' ? 'podman' : 'unshare';

/** Mounts a runtime provides beside the image's own: devices, /proc, /sys, podman's /etc files. */
export function isRuntimeMount(mountPoint: string): boolean {
  return (
    /^\/(dev|proc|sys)(\/|$)/.test(mountPoint) ||
    ['/etc/hosts', '/etc/resolv.conf', '/etc/hostname', '/run/.containerenv'].includes(mountPoint)
  );
}

let podmanImage: Promise<string> | undefined;
/** `podman load` of the archive, once per test file; resolves with the image name. */
function loadIntoPodman(archive: string, name: string): Promise<string> {
  podmanImage ??= must('podman', ['load', '--quiet', '--input', archive]).then(() => name);
  return podmanImage;
}

export function runContainer(image: UnpackedImage, options: ContainerOptions = {}): Container {
  return RUNTIME === 'podman' ? runInPodman(image, options) : runInNamespaces(image, options);
}

function runInNamespaces(image: UnpackedImage, options: ContainerOptions): Container {
  const env = new Map(image.process.env.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
  for (const [k, v] of Object.entries(options.env ?? {})) env.set(k, v);
  const entrypoint = image.image.config.Entrypoint;
  const args = options.command ? [...entrypoint, ...options.command] : image.process.args;
  const { uid, gid } = image.process.user;
  const volumes = Object.entries(options.volumes ?? {}).flat();
  const child = spawn(
    'unshare',
    [
      '--mount',
      '--pid',
      '--fork',
      '--kill-child',
      '--',
      'sh',
      '-c',
      SETUP,
      'setup',
      image.rootfs,
      ...volumes,
      '--',
      'env',
      '-i',
      ...[...env].map(([k, v]) => `${k}=${v}`),
      'unshare',
      `--root=${image.rootfs}`,
      `--wd=${image.process.cwd}`,
      `--setgid=${gid}`,
      `--setuid=${uid}`,
      '--',
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // PID 1 is the child `unshare --fork` made.
  return watch(
    child,
    async () => (await childrenOf(child.pid!))[0],
    async (pid, signal) => {
      process.kill(pid, signal);
    },
  );
}

let podmanNames = 0;
function runInPodman(image: UnpackedImage, options: ContainerOptions): Container {
  const name = `arkvory-test-${process.pid}-${++podmanNames}`;
  const args = ['run', '--rm', '--name', name, '--network', 'host', '--read-only', '--read-only-tmpfs=false'];
  args.push('--tmpfs', '/tmp:mode=1777');
  for (const [host, target] of Object.entries(options.volumes ?? {})) args.push('--volume', `${host}:${target}`);
  for (const [k, v] of Object.entries(options.env ?? {})) args.push('--env', `${k}=${v}`);
  const ref = image.image.config.Labels['org.opencontainers.image.ref.name']!;
  const child = spawn('sh', ['-c', 'exec podman "$@"', 'podman', ...args, ref, ...(options.command ?? [])], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return watch(
    child,
    async () => {
      const r = await runProcess('podman', ['inspect', '--format', '{{.State.Pid}}', name]);
      const pid = Number(r.stdout.trim());
      return r.code === 0 && pid > 0 ? pid : undefined;
    },
    async (_pid, signal) => {
      await must('podman', ['kill', '--signal', signal, name]);
    },
  );
}

/** Call before runContainer under podman: loads the archive the image was unpacked from. */
export async function prepareRuntime(archive: string, image: UnpackedImage): Promise<void> {
  if (RUNTIME === 'podman')
    await loadIntoPodman(archive, image.image.config.Labels['org.opencontainers.image.ref.name']!);
}

async function childrenOf(pid: number): Promise<number[]> {
  return (await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => ''))
    .split(' ')
    .filter(Boolean)
    .map(Number);
}

function watch(
  child: ChildProcess,
  findPid1: () => Promise<number | undefined>,
  send: (pid1: number, signal: NodeJS.Signals) => Promise<void>,
): Container {
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = exitedWithOutput(child);
  const pid1 = async () => {
    for (let i = 0; i < 500; i++) {
      const pid = await findPid1();
      if (pid) return pid;
      await sleep(10);
    }
    throw new Error(`the container's PID 1 did not start:\n${stdout}${stderr}`);
  };
  return {
    child,
    exited,
    logs: () => stdout + stderr,
    logLines: () =>
      stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    pid1,
    children: childrenOf,
    async signal(signal) {
      await send(await pid1(), signal);
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      // Not only the `unshare` parent: its --kill-child does not reach PID 1, whose parent-death
      // signal is cleared when it takes the image's user.
      const pid = await findPid1().catch(() => undefined);
      if (pid) await send(pid, 'SIGKILL').catch(() => {});
      child.kill('SIGKILL');
    },
  };
}

/** Waits until GET `url` answers 200 (the container still running), or throws with its logs. */
export async function waitReady(container: Container, url: string, timeoutMs = 60_000): Promise<void> {
  let exited: number | string | undefined;
  void container.exited.then((code) => (exited = code));
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (exited !== undefined)
      throw new Error(`the container exited (${exited}) before ${url} answered:\n${container.logs()}`);
    const status = await fetch(url).then(
      async (r) => (await r.arrayBuffer(), r.status),
      () => 0,
    );
    if (status === 200) return;
    await sleep(50);
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms:\n${container.logs()}`);
}

/** A host directory the image's user owns, for a volume. */
export async function volumeDir(dir: string, uid: number, gid: number): Promise<string> {
  await mkdir(dir, { recursive: true, mode: 0o750 });
  await must('chown', [`${uid}:${gid}`, dir]);
  return dir;
}

/** The mounts a process sees: mount point and whether it is read-only. */
export async function mountsOf(pid: number): Promise<Array<{ mountPoint: string; readOnly: boolean; type: string }>> {
  return (await readFile(`/proc/${pid}/mountinfo`, 'utf8'))
    .trim()
    .split('\n')
    .map((line) => {
      const fields = line.split(' ');
      const separator = fields.indexOf('-');
      return {
        mountPoint: fields[4]!,
        readOnly: fields[5]!.split(',').includes('ro'),
        type: fields[separator + 1]!,
      };
    });
}
