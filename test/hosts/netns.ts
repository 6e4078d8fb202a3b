/**
 * Several hosts on this one machine: a Linux network namespace per host, a veth pair from each to
 * one bridge, addresses on a private /24 that exists only inside the test. Nothing here adds a
 * default route or enables forwarding, so no packet can leave the machine. Faults use the kernel's
 * own tools: a host's link down (its switch port), `tc netem` loss or delay towards one peer.
 *
 * Every name starts with NAME_PREFIX; `removeLeftovers()` deletes whatever an earlier, interrupted
 * run left (processes inside those namespaces first, then the namespaces, then the bridge).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Prefix of every namespace, link and bridge the harness makes (interface names are ≤ 15 bytes). */
export const NAME_PREFIX = 'akh-';
export const BRIDGE = `${NAME_PREFIX}br`;
export const SUBNET = '10.213.24';
/** The test process's own address on the bridge (root namespace): it drives setup and checks. */
export const CONTROL_ADDRESS = `${SUBNET}.1`;

export class HostsUnavailableError extends Error {
  override readonly name = 'HostsUnavailableError';
  readonly code = 'hosts_unavailable' as const;
}

/** The multi-host suite needs root (network namespaces) and iproute2; otherwise it fails saying so. */
export function requireHostTools(): void {
  if (process.getuid?.() !== 0) {
    throw new HostsUnavailableError('the multi-host suite (npm run test:hosts) builds network namespaces and needs root; run it as root (CI runs as root), e.g. `sudo npm run test:hosts`');
  }
  for (const tool of ['ip', 'tc']) {
    if (spawnSync(tool, ['-V'], { stdio: 'ignore' }).error) throw new HostsUnavailableError(`\`${tool}\` is not installed; on Debian: apt-get install -y iproute2`);
  }
}

export function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function tc(ns: string, ...args: string[]): void {
  execFileSync('ip', ['netns', 'exec', ns, 'tc', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
}

function tryRun(cmd: string, args: string[]): void {
  spawnSync(cmd, args, { stdio: 'ignore' });
}

export function namespaceOf(host: string): string {
  return `${NAME_PREFIX}${host}`;
}

/** Kills every process inside our namespaces, deletes them and the bridge; safe to call any time. */
export function removeLeftovers(): void {
  const listed = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout ?? '';
  const namespaces = listed
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(NAME_PREFIX));
  for (const ns of namespaces) {
    const pids = (spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout ?? '').split('\n').filter((p) => /^\d+$/.test(p));
    for (const pid of pids) {
      try {
        // SIGCONT first: a SIGSTOPped process would otherwise hold its namespace until continued.
        process.kill(Number(pid), 'SIGKILL');
        process.kill(Number(pid), 'SIGCONT');
      } catch {
        // already gone
      }
    }
  }
  for (const ns of namespaces) tryRun('ip', ['netns', 'delete', ns]);
  // A veth's peer goes with its namespace; the bridge and any stray host end are ours to remove.
  const links = spawnSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' }).stdout ?? '';
  for (const line of links.split('\n')) {
    const name = line.split(': ')[1]?.split('@')[0];
    if (name?.startsWith(NAME_PREFIX)) tryRun('ip', ['link', 'delete', name]);
  }
}

export interface HostAddress {
  readonly name: string;
  readonly ns: string;
  readonly address: string;
}

/** The bridge with the control address, then one namespace per host, each with `lo` and `eth0` up. */
export function buildNetwork(hosts: Readonly<Record<string, number>>): Record<string, HostAddress> {
  if (!existsSync('/var/run/netns') && !existsSync('/run/netns')) ip('netns', 'list'); // creates the directory lazily
  ip('link', 'add', BRIDGE, 'type', 'bridge');
  ip('addr', 'add', `${CONTROL_ADDRESS}/24`, 'dev', BRIDGE);
  ip('link', 'set', BRIDGE, 'up');
  const out: Record<string, HostAddress> = {};
  for (const [name, octet] of Object.entries(hosts)) {
    const ns = namespaceOf(name);
    const address = `${SUBNET}.${octet}`;
    ip('netns', 'add', ns);
    ip('link', 'add', ns, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    ip('link', 'set', ns, 'master', BRIDGE, 'up');
    ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    ip('-n', ns, 'link', 'set', 'eth0', 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    out[name] = { name, ns, address };
  }
  return out;
}

/** The host's switch port goes down (or up): it is cut from every other host, silently. */
export function setLink(host: HostAddress, up: boolean): void {
  ip('link', 'set', host.ns, up ? 'up' : 'down');
}

/**
 * Egress impairment of `from` towards `to` only: a prio qdisc whose third band carries the netem,
 * and a u32 filter sending packets for `to` into it. One impairment per host at a time.
 */
function impair(from: HostAddress, to: HostAddress, netem: string[]): void {
  tc(from.ns, 'qdisc', 'add', 'dev', 'eth0', 'root', 'handle', '1:', 'prio', 'bands', '3');
  tc(from.ns, 'qdisc', 'add', 'dev', 'eth0', 'parent', '1:3', 'handle', '30:', 'netem', ...netem);
  tc(from.ns, 'filter', 'add', 'dev', 'eth0', 'parent', '1:', 'protocol', 'ip', 'prio', '1', 'u32', 'match', 'ip', 'dst', `${to.address}/32`, 'flowid', '1:3');
}

function clearImpairments(host: HostAddress): void {
  tryRun('ip', ['netns', 'exec', host.ns, 'tc', 'qdisc', 'del', 'dev', 'eth0', 'root']);
}

/** `a` and `b` lose every packet to each other (both directions); other peers are unaffected. */
export function partition(a: HostAddress, b: HostAddress): void {
  impair(a, b, ['loss', '100%']);
  impair(b, a, ['loss', '100%']);
}

/** Every packet between `a` and `b` waits `ms` in each direction. */
export function delay(a: HostAddress, b: HostAddress, ms: number): void {
  impair(a, b, ['delay', `${ms}ms`]);
  impair(b, a, ['delay', `${ms}ms`]);
}

/** Removes the impairments of both hosts. */
export function heal(a: HostAddress, b: HostAddress): void {
  clearImpairments(a);
  clearImpairments(b);
}
