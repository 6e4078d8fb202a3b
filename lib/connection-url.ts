/**
 * A PostgreSQL URL, or a function giving the current one. The function form lets a password rotate
 * without a restart (proxy/config/secret-rotation.ts): every new connection asks it, connections
 * already open keep the credentials they logged in with.
 */
import type pg from 'pg';

export type ConnectionUrl = string | (() => string);

export function currentUrl(url: ConnectionUrl): string {
  return typeof url === 'function' ? url() : url;
}

/**
 * A pg Client class for a Pool's `Client` option that reads `url` as each connection is made, so a
 * pool's new connections use a rotated password while its open ones finish with the old one. (A
 * `password` function would do for a fixed URL, but pg lets a connection string's empty password
 * override it.)
 */
export function clientClassFor(base: typeof pg.Client, url: ConnectionUrl): typeof pg.Client {
  return class extends base {
    constructor(config?: pg.ClientConfig) {
      super({ ...config, connectionString: currentUrl(url) });
    }
  };
}
