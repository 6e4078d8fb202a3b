/** What a start checks before it creates any state, and the startup line stating the ceilings; real gateway processes. */
import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';

describe('startup checks before any state exists', () => {
  const db = useTestDatabase();

  it('a busy port fails the start before the embedded cluster, admin.key or storage-id is created', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const parent = await makeTempDir();
      const dataDir = path.join(parent, 'fresh');
      const gw = await startGateway({ dataDir, env: { ARKVORY_PORT: String(port) }, waitFor: 'none' });
      expect(await gw.exited).toBe(1);
      expect(gw.logs()).toContain(`127.0.0.1:${port} is already in use`);
      expect(gw.logs()).toContain('"code":"port_in_use"');
      expect(existsSync(dataDir), 'the data dir was not even created').toBe(false);
      expect(await readdir(parent)).toEqual([]);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it('a data dir that cannot be created (/proc/sys) or is a file fails at once with a clear message', async () => {
    const proc = await startGateway({ dataDir: '/proc/sys/arkvory-test/data', waitFor: 'none' });
    expect(await proc.exited).toBe(1);
    expect(proc.logs()).toContain('ARKVORY_DATA_DIR=/proc/sys/arkvory-test/data: cannot create /proc/sys/arkvory-test');
    expect(proc.logs()).toContain('"code":"data_dir_unusable"');
    const file = path.join(await makeTempDir(), 'a-file');
    await writeFile(file, 'x');
    const notDir = await startGateway({ dataDir: file, waitFor: 'none' });
    expect(await notDir.exited).toBe(1);
    expect(notDir.logs()).toContain(`ARKVORY_DATA_DIR=${file} is not a directory`);
  }, 60_000);

  it('a started gateway logs one line stating the ceilings it enforces', async () => {
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_DOWNLOAD_BYTES_PER_SECOND: '1048576',
        ARKVORY_MAX_UPLOADS_PER_PRINCIPAL: '2',
      },
    });
    const line = gw.logLines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('ceilings: '));
    expect(line?.msg).toBe(
      'ceilings: downloads 1 MiB/s (no ceiling per principal), 256 at once (4 per principal); uploads no ceiling (no ceiling per principal), 2 at once per principal, at most 10 GiB each',
    );
    expect(line?.ceilings).toMatchObject({ downloadBytesPerSecond: 1048576, maxUploadsPerPrincipal: 2 });
  });
});
