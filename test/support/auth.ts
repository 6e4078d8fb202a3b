import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import type { Scope } from '../../policy/auth/principal.ts';

export async function createRepository(pool: pg.Pool, name: string): Promise<void> {
  await new AdminStore(pool).createRepository(name);
}

/** A principal with one key (default scopes read+write) and the given grants; repositories must exist. */
export async function createServiceAccount(
  pool: pg.Pool,
  options: { name?: string; scopes?: Scope[]; grants?: Record<string, Permission>; expiresInSeconds?: number } = {},
): Promise<{ principalId: string; keyId: string; key: string; name: string }> {
  const store = new AdminStore(pool);
  const name = options.name ?? `sa-${randomBytes(4).toString('hex')}`;
  const principal = await store.createPrincipal(name);
  const key = await store.createKey(principal.id, {
    scopes: options.scopes ?? ['read', 'write'],
    ...(options.expiresInSeconds ? { expiresInSeconds: options.expiresInSeconds } : {}),
  });
  for (const [repo, permission] of Object.entries(options.grants ?? {}))
    await store.addGrant(principal.id, repo, permission);
  return { principalId: principal.id, keyId: key.keyId, key: key.key, name };
}

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}
