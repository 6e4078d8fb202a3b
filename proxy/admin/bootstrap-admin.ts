import { rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import type { Services } from '../server/services.ts';

export const ADMIN_KEY_FILE = 'admin.key';

/**
 * First start on the embedded default: with no principal at all, create `admin` with a key of every
 * scope and write the key to `<DATA_DIR>/admin.key` (mode 0600). The key itself never reaches a log.
 */
export async function bootstrapAdmin(services: Services): Promise<void> {
  if (!services.isEmbeddedDatabase || services.config.role !== 'api') return;
  const count = await services.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM arkvory_principals');
  if (count.rows[0]!.n > 0) return;
  const store = new AdminStore(services.pool);
  const principal = await store.createPrincipal('admin');
  const created = await store.createKey(principal.id, {
    scopes: ['read', 'write', 'admin'],
    description: 'first-start admin key',
  });
  const file = path.join(services.config.dataDir, ADMIN_KEY_FILE);
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, `${created.key}\n`, { mode: 0o600, flag: 'wx' });
  await rename(temp, file);
  services.log.info(
    { file, principal: principal.id, keyId: created.keyId },
    `first start: created principal "admin"; its key is in ${file} (send it as Authorization: Bearer <key>)`,
  );
}
