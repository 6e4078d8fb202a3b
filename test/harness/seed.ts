/** The rows most scenarios start from: a repository, principals with grants, and their keys. */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import type { Permission } from '../../policy/auth/authorize.ts';
import type { Scope } from '../../policy/auth/principal.ts';

export interface ServiceAccount {
  readonly principalId: string;
  readonly keyId: string;
  readonly key: string;
  readonly name: string;
}

export async function createRepository(pool: pg.Pool, name: string): Promise<void> {
  await new AdminStore(pool).createRepository(name);
}

/** A principal with one key (default scopes read+write) and the given grants; repositories must exist. */
export async function createServiceAccount(
  pool: pg.Pool,
  options: { name?: string; scopes?: Scope[]; grants?: Record<string, Permission>; expiresInSeconds?: number } = {},
): Promise<ServiceAccount> {
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

/**
 * Creates `repository` and `writers` principals named `<repository>-<i>`, each allowed to write
 * there with a read+write key; returns their keys in order.
 */
export async function seedWriters(pool: pg.Pool, repository: string, writers = 1): Promise<string[]> {
  await createRepository(pool, repository);
  const keys: string[] = [];
  for (let i = 0; i < writers; i++)
    keys.push(
      (await createServiceAccount(pool, { name: `${repository}-${i}`, grants: { [repository]: 'write' } })).key,
    );
  return keys;
}

export function bearer(key: string): Record<string, string> {
  return { authorization: `Bearer ${key}` };
}
