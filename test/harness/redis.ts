/** A real redis-server from PATH on a loopback port, and the check that a Redis answers. */
import { freeLoopbackPort } from './ports.ts';
import { startProcess, type ManagedProcess } from './managed-process.ts';
import { waitUntil } from './wait.ts';

export const REDIS_INSTALL_HINT = 'redis-server is not on PATH; on Debian: apt-get install -y redis-server';

export interface RedisServer extends ManagedProcess {
  readonly url: string;
  readonly port: number;
}

/** True once a Redis at `url` answers PING (false while it does not listen yet). */
export async function pingRedis(url: string): Promise<boolean> {
  // Loaded here: every test file imports the harness, few ping a Redis.
  const { Redis } = await import('ioredis');
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/**
 * redis-server on 127.0.0.1 (a free port unless given) without persistence, `args` appended;
 * resolves once it answers PING. Without redis-server on PATH it throws REDIS_INSTALL_HINT.
 */
export async function startRedisServer(
  options: { port?: number; args?: readonly string[] } = {},
): Promise<RedisServer> {
  const port = options.port ?? (await freeLoopbackPort());
  const server = startProcess(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...(options.args ?? [])],
    { name: 'redis-server' },
  );
  const url = `redis://127.0.0.1:${port}`;
  try {
    await waitUntil(() => pingRedis(url), {
      what: `redis-server on port ${port} to answer`,
      timeoutMs: 5000,
      process: server,
    });
  } catch (err) {
    await server.stop('SIGKILL');
    if (server.logs().includes('ENOENT')) throw new Error(REDIS_INSTALL_HINT, { cause: err });
    throw err;
  }
  return Object.assign(server, { url, port });
}
