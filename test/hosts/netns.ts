/**
 * Several hosts on this one machine: a Linux network namespace per host, a veth pair from each to
 * one bridge, addresses on a private /24 that exists only inside the test. Nothing here adds a
 * default route or enables forwarding, so no packet can leave the machine. Faults use the kernel's
 * own tools: a host's link down (its switch port), or a silent partition between two hosts.
 *
 * Each test file builds its own network (`claimNetwork`): its names start with the network's prefix
 * and its addresses lie in the network's own /24, so files run side by side like the other suites.
 * `removeLeftovers(network)` deletes whatever an earlier, interrupted run left under that prefix
 * (processes inside those namespaces first, then the namespaces, then the bridge).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { claimForRun } from '../harness/ports.ts';

/** One test file's network: its name prefix (interface names are ≤ 15 bytes) and its /24. */
export interface HostNetwork {
  /** `akh<index>-`: every namespace, link and bridge of this network starts with it. */
  readonly prefix: string;
  readonly bridge: string;
  /** The first three octets, e.g. `10.213.24`. */
  readonly subnet: string;
  /** The test process's own address on the bridge (root namespace): it drives setup and checks. */
  readonly controlAddress: string;
}

/** Networks one test run may hold at once (10.213.24.0/24 upwards). */
const MAX_NETWORKS = 64;

function hostNetwork(index: number): HostNetwork {
  const prefix = `akh${index}-`;
  const subnet = `10.213.${24 + index}`;
  return { prefix, bridge: `${prefix}br`, subnet, controlAddress: `${subnet}.1` };
}

/** A network no other file of this test run holds, claimed like ports are (`claimForRun`). */
export async function claimNetwork(): Promise<HostNetwork> {
  for (let index = 0; index < MAX_NETWORKS; index++)
    if (await claimForRun(`hosts-network-${index}`)) return hostNetwork(index);
  throw new Error(`all ${MAX_NETWORKS} host networks of this test run are taken`);
}

export class HostsUnavailableError extends Error {
  override readonly name = 'HostsUnavailableError';
  readonly code = 'hosts_unavailable' as const;
}

/** The multi-host suite needs root (network namespaces) and iproute2; otherwise it fails saying so. */
export function requireHostTools(): void {
  if (process.getuid?.() !== 0) {
    throw new HostsUnavailableError(
      'the multi-host suite (npm run test:hosts) builds network namespaces and needs root; run it as root (CI runs as root), e.g. `sudo npm run test:hosts`',
    );
  }
  if (spawnSync('ip', ['-V'], { stdio: 'ignore' }).error)
    throw new HostsUnavailableError('`ip` is not installed; on Debian: apt-get install -y iproute2');
}

export function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function tryRun(cmd: string, args: string[]): void {
  spawnSync(cmd, args, { stdio: 'ignore' });
}

/** Kills every process inside the network's namespaces, deletes them and its bridge; safe to call any time. */
export function removeLeftovers(network: HostNetwork): void {
  const listed = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout ?? '';
  const namespaces = listed
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(network.prefix));
  for (const ns of namespaces) {
    const pids = (spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).stdout ?? '')
      .split('\n')
      .filter((p) => /^\d+$/.test(p));
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
    if (name?.startsWith(network.prefix)) tryRun('ip', ['link', 'delete', name]);
  }
}

export interface HostAddress {
  readonly name: string;
  readonly ns: string;
  readonly address: string;
}

/** The most a socket of a host may buffer unread (bytes), the kernel's autotuning included. */
const RECEIVE_BUFFER_MAX = 256 * 1024;

/** The bridge with the control address, then one namespace per host, each with `lo` and `eth0` up. */
export function buildNetwork(
  network: HostNetwork,
  hosts: Readonly<Record<string, number>>,
): Record<string, HostAddress> {
  if (!existsSync('/var/run/netns') && !existsSync('/run/netns')) ip('netns', 'list'); // creates the directory lazily
  ip('link', 'add', network.bridge, 'type', 'bridge');
  ip('addr', 'add', `${network.controlAddress}/24`, 'dev', network.bridge);
  ip('link', 'set', network.bridge, 'up');
  const out: Record<string, HostAddress> = {};
  for (const [name, octet] of Object.entries(hosts)) {
    const ns = `${network.prefix}${name}`;
    const address = `${network.subnet}.${octet}`;
    ip('netns', 'add', ns);
    ip('link', 'add', ns, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
    ip('link', 'set', ns, 'master', network.bridge, 'up');
    ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    ip('-n', ns, 'link', 'set', 'eth0', 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    // A host's TCP receive buffer may grow to 32 MiB here: a gateway paced at 256 KiB/s then holds a
    // whole test file read ahead from the store within a second, and a store partition cuts nothing.
    // 256 KiB (still ~5 GB/s at this network's round trip) keeps the bytes on the store's side.
    ip('netns', 'exec', ns, 'sh', '-c', `echo 4096 131072 ${RECEIVE_BUFFER_MAX} > /proc/sys/net/ipv4/tcp_rmem`);
    out[name] = { name, ns, address };
  }
  return out;
}

/** The host's switch port goes down (or up): it is cut from every other host, silently. */
export function setLink(host: HostAddress, up: boolean): void {
  ip('link', 'set', host.ns, up ? 'up' : 'down');
}

/** A MAC address no interface has: frames sent to it are flooded by the bridge and dropped by every host. */
const NOWHERE_MAC = '02:00:00:00:de:ad';

/**
 * `a` and `b` lose every packet to each other, both ways, silently (no RST, no ICMP): each host's
 * neighbour entry for the other is pinned to a MAC nobody owns. Other peers are unaffected.
 * (This kernel has no sch_netem or tc classifiers, so the partition is made in the neighbour table.)
 */
export function partition(a: HostAddress, b: HostAddress): void {
  ip('-n', a.ns, 'neigh', 'replace', b.address, 'lladdr', NOWHERE_MAC, 'nud', 'permanent', 'dev', 'eth0');
  ip('-n', b.ns, 'neigh', 'replace', a.address, 'lladdr', NOWHERE_MAC, 'nud', 'permanent', 'dev', 'eth0');
}

/** Ends a partition: the pinned entries go, ARP finds the real addresses again. */
export function heal(a: HostAddress, b: HostAddress): void {
  tryRun('ip', ['-n', a.ns, 'neigh', 'del', b.address, 'dev', 'eth0']);
  tryRun('ip', ['-n', b.ns, 'neigh', 'del', a.address, 'dev', 'eth0']);
}
