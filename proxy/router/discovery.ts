/**
 * Where the router's gateways come from: a static list (ARKVORY_ROUTER_BACKENDS, writer first) or
 * the live rows of `arkvory_gateway_leases` (each gateway records ARKVORY_ADVERTISE_URL with its
 * lease; slot 0 / role `api` is the writer). Reading leases needs only SELECT; the router takes no
 * lease and no barrier.
 */
import type { Logger } from 'pino';
import { clientClassFor, type ConnectionUrl } from '../../lib/connection-url.ts';
import type { SecretVerifier } from '../config/secret-rotation.ts';
import type { BackendSpec } from './backend-pool.ts';

export interface Discovery {
  readonly kind: 'static' | 'leases';
  discover(): Promise<BackendSpec[]>;
  close(): Promise<void>;
}

export function staticDiscovery(origins: readonly string[]): Discovery {
  const specs: BackendSpec[] = origins.map((url, i) => ({ url, role: i === 0 ? 'writer' : 'reader' }));
  return { kind: 'static', discover: async () => specs, close: async () => {} };
}

export interface LeaseRow {
  slot: number;
  role: string;
  advertise_url: string | null;
}

/** Live lease rows → backends (pure). Rows without an advertised URL cannot be routed to. */
export function backendsFromLeases(rows: readonly LeaseRow[]): { backends: BackendSpec[]; unadvertised: number[] } {
  const backends: BackendSpec[] = [];
  const unadvertised: number[] = [];
  for (const row of rows) {
    if (!row.advertise_url) {
      unadvertised.push(row.slot);
      continue;
    }
    backends.push({ url: row.advertise_url, role: row.role === 'api' && row.slot === 0 ? 'writer' : 'reader' });
  }
  return { backends, unadvertised };
}

/** SQLSTATEs of a connection the server ended: admin_shutdown, crash_shutdown. */
const SERVER_ENDED_CONNECTION = new Set(['57P01', '57P02']);

/**
 * Discovery from the lease table. `pg` is loaded here, not at startup: a router with a static list
 * keeps its module graph (and so the heap every full GC marks) without the database client.
 */
export async function leaseDiscovery(
  databaseUrl: ConnectionUrl,
  log: Logger,
  queryTimeoutMs: number,
): Promise<Discovery> {
  const [{ default: pg }, { PgClient }] = await Promise.all([import('pg'), import('../../lib/pg-client.ts')]);
  const pool = new pg.Pool({
    Client: clientClassFor(PgClient, databaseUrl),
    max: 1,
    application_name: 'arkvory-router',
    connectionTimeoutMillis: queryTimeoutMs,
    query_timeout: queryTimeoutMs,
    idleTimeoutMillis: 30_000,
  });
  pool.on('error', (err) => log.warn({ err: err.message }, 'idle lease-discovery connection failed'));
  const warned = new Set<number>();
  const readLeases = async () =>
    (
      await pool.query<LeaseRow>(
        `SELECT slot, role, advertise_url FROM arkvory_gateway_leases WHERE expires_at > clock_timestamp() ORDER BY slot`,
      )
    ).rows;
  return {
    kind: 'leases',
    async discover() {
      let rows: LeaseRow[];
      try {
        rows = await readLeases();
      } catch (err) {
        // The server ended the connection under the query (an administrator's terminate, as after a
        // password rotation, or a restart): the pool has dropped it, and one new connection is tried.
        if (!SERVER_ENDED_CONNECTION.has((err as { code?: unknown }).code as string)) throw err;
        rows = await readLeases();
      }
      const { backends, unadvertised } = backendsFromLeases(rows);
      for (const slot of unadvertised) {
        if (warned.has(slot)) continue;
        warned.add(slot);
        log.warn(
          { slot },
          'a live gateway lease has no advertised URL; set ARKVORY_ADVERTISE_URL on that gateway so routers can reach it',
        );
      }
      return backends;
    },
    close: () => pool.end(),
  };
}

/** Checks a rotated database URL or password before discovery uses it: the lease table is readable with it. */
export function leaseLoginVerifier(queryTimeoutMs: number): SecretVerifier {
  return {
    what: 'PostgreSQL',
    variables: ['ARKVORY_DATABASE_URL', 'ARKVORY_DATABASE_PASSWORD'],
    changed: (current, next) => current.databaseUrl !== next.databaseUrl,
    async verify(next) {
      if (next.databaseUrl === undefined || next.router.backends) return;
      const { PgClient } = await import('../../lib/pg-client.ts');
      const client = new PgClient({
        connectionString: next.databaseUrl,
        application_name: 'arkvory-router-rotation',
        connectionTimeoutMillis: queryTimeoutMs,
        query_timeout: queryTimeoutMs,
      });
      client.on('error', () => {});
      try {
        await client.connect();
        await client.query('SELECT slot FROM arkvory_gateway_leases LIMIT 1');
      } finally {
        await client.end().catch(() => {});
      }
    },
  };
}
