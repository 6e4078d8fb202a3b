/** A loopback port free at the moment of asking (the embedded PostgreSQL, tests and benchmarks). */
import net from 'node:net';

/** Binds port 0 on 127.0.0.1, reads the port the kernel chose, and closes again. */
export async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
