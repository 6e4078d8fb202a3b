import { readFileSync } from 'node:fs';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { FETCH_BLOCKED_PORTS, freeLoopbackPort, usablePort } from './free-port.ts';

const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);

describe('freeLoopbackPort', () => {
  it('gives ports below the ephemeral range, where no outgoing connection can take them first, that a server can bind', async () => {
    for (let i = 0; i < 20; i++) {
      const port = await freeLoopbackPort();
      expect(port).toBeGreaterThanOrEqual(10_000);
      expect(port).toBeLessThan(ephemeralLow);
      const server = net.createServer();
      await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('never gives a port it was told to avoid: with every port below the ephemeral range avoided, one from the range', async () => {
    const avoid = new Set(Array.from({ length: ephemeralLow - 10_000 }, (_, i) => 10_000 + i));
    for (let i = 0; i < 5; i++) expect(await freeLoopbackPort(avoid)).toBeGreaterThanOrEqual(ephemeralLow);
  });

  it('never gives a port fetch refuses (a gateway there could not be reached by fetch; a test run once got 10080)', async () => {
    for (const port of FETCH_BLOCKED_PORTS) {
      expect(usablePort(port, new Set())).toBe(false);
      const refused = await fetch(`http://127.0.0.1:${port}/`).then(
        () => undefined,
        (err: Error) => (err.cause as Error | undefined)?.message,
      );
      expect(refused).toBe('bad port');
    }
    expect(usablePort(10081, new Set())).toBe(true);
    expect(usablePort(10081, new Set([10081]))).toBe(false);
  });
});
