/**
 * A named TCP proxy (the real `Proxy`): listens while enabled, dials the upstream for each client,
 * and keeps the toxic list every current and future connection follows. Disabling closes the
 * listener (new clients are refused) and drops every open connection.
 */
import net from 'node:net';
import { Connection } from './connection.ts';
import { ApiError } from './api-errors.ts';
import type { StreamDirection, ToxicSpec } from './toxics.ts';

export interface ProxyJson {
  name: string;
  listen: string;
  upstream: string;
  enabled: boolean;
  toxics: ToxicSpec[];
}

export class ProxyAlreadyStartedError extends Error {
  override readonly name = 'ProxyAlreadyStartedError';
}

/** Splits `host:port` / `[v6]:port`; an empty host means loopback here (the real server binds all). */
export function parseHostPort(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(':');
  const portText = colon >= 0 ? address.slice(colon + 1) : '';
  const port = Number(portText);
  if (colon < 0 || portText === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`address ${address}: missing or invalid port in address`);
  }
  let host = address.slice(0, colon);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  return { host: host === '' ? '127.0.0.1' : host, port };
}

function formatAddress(address: net.AddressInfo): string {
  return address.family === 'IPv6' ? `[${address.address}]:${address.port}` : `${address.address}:${address.port}`;
}

export class StandinProxy {
  readonly name: string;
  listen: string;
  upstream: string;
  enabled = false;
  readonly toxics: Record<StreamDirection, ToxicSpec[]> = { upstream: [], downstream: [] };
  #server: net.Server | undefined;
  readonly #connections = new Set<Connection>();
  /** Clients whose upstream is still being dialled (upstream socket -> client socket). */
  readonly #dialing = new Map<net.Socket, net.Socket>();

  constructor(name: string, listen: string, upstream: string) {
    this.name = name;
    this.listen = listen;
    this.upstream = upstream;
  }

  toJSON(): ProxyJson {
    return { name: this.name, listen: this.listen, upstream: this.upstream, enabled: this.enabled, toxics: this.allToxics() };
  }

  /** Upstream toxics first, then downstream, each in the order added (as the real server lists them). */
  allToxics(): ToxicSpec[] {
    return [...this.toxics.upstream, ...this.toxics.downstream];
  }

  findToxic(name: string): ToxicSpec | undefined {
    return this.allToxics().find((t) => t.name === name);
  }

  async start(): Promise<void> {
    if (this.enabled) throw new ProxyAlreadyStartedError(`proxy ${this.name} already started`);
    let address: { host: string; port: number };
    try {
      address = parseHostPort(this.listen);
    } catch (err) {
      throw new ApiError(500, `listen tcp ${(err as Error).message}`);
    }
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (client) => this.#accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(new ApiError(500, `listen tcp ${this.listen}: ${err.message}`)));
      server.listen(address.port, address.host, () => resolve());
    });
    server.on('error', () => {});
    this.#server = server;
    this.listen = formatAddress(server.address() as net.AddressInfo);
    this.enabled = true;
  }

  async stop(): Promise<void> {
    if (!this.enabled) return;
    this.enabled = false;
    const server = this.#server;
    this.#server = undefined;
    const closed = new Promise<void>((resolve) => server?.close(() => resolve()) ?? resolve());
    for (const [upstream, client] of this.#dialing) {
      upstream.destroy();
      client.destroy();
    }
    this.#dialing.clear();
    for (const connection of this.#connections) connection.destroy();
    this.#connections.clear();
    await closed;
  }

  async update(input: { listen: string; upstream: string; enabled: boolean }): Promise<void> {
    if (input.listen !== this.listen || input.upstream !== this.upstream) {
      await this.stop();
      this.listen = input.listen;
      this.upstream = input.upstream;
    }
    if (input.enabled !== this.enabled) {
      if (input.enabled) await this.start();
      else await this.stop();
    }
  }

  addToxic(spec: ToxicSpec): void {
    this.toxics[spec.stream].push(spec);
    for (const connection of this.#connections) connection.links[spec.stream].addToxic(spec);
  }

  updateToxic(spec: ToxicSpec): void {
    const list = this.toxics[spec.stream];
    const index = list.findIndex((t) => t.name === spec.name);
    if (index < 0) return;
    list[index] = spec;
    for (const connection of this.#connections) connection.links[spec.stream].updateToxic(spec);
  }

  removeToxic(spec: ToxicSpec): void {
    const list = this.toxics[spec.stream];
    const index = list.indexOf(spec);
    if (index >= 0) list.splice(index, 1);
    for (const connection of this.#connections) connection.links[spec.stream].removeToxic(spec.name);
  }

  removeAllToxics(): void {
    for (const spec of this.allToxics()) this.removeToxic(spec);
  }

  #accept(client: net.Socket): void {
    const server = this.#server;
    client.on('error', () => {});
    let target: { host: string; port: number };
    try {
      target = parseHostPort(this.upstream);
    } catch {
      client.destroy();
      return;
    }
    const upstream = net.connect({ host: target.host, port: target.port, allowHalfOpen: true, noDelay: true });
    this.#dialing.set(upstream, client);
    upstream.on('error', () => {});
    upstream.once('error', () => {
      this.#dialing.delete(upstream);
      client.destroy();
    });
    upstream.once('connect', () => {
      this.#dialing.delete(upstream);
      if (this.#server !== server || client.destroyed) {
        upstream.destroy();
        client.destroy();
        return;
      }
      const toxics = { upstream: [...this.toxics.upstream], downstream: [...this.toxics.downstream] };
      const connection = new Connection(client, upstream, toxics, () => this.#connections.delete(connection));
      this.#connections.add(connection);
    });
  }
}
