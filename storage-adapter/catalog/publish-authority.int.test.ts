/**
 * The catalog insert judges who publishes in its own statement (catalog.ts `PublishAuthority`), on
 * real PostgreSQL: a key revoked, a principal disabled (even enabled again), a grant lowered or
 * removed after the last check in the gateway, while the bytes were being committed (an S3 copy of
 * a large blob may take minutes), publishes nothing and settles no reservation. Before, the last check
 * ran before the commit, and whatever was revoked during it was published.
 */
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { AdminStore } from '../../policy/auth/admin-store.ts';
import { createRepository, createServiceAccount, type ServiceAccount } from '../../test/harness/index.ts';
import { artifactEntry } from '../../test/support/catalog-entries.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { type AuthorityVerdict, createCatalog, type PublishAuthority } from './catalog.ts';

const db = useTestDatabase();
const repository = 'publish-authority';

class Refused extends Error {
  readonly verdict: AuthorityVerdict;
  constructor(verdict: AuthorityVerdict) {
    super(verdict);
    this.verdict = verdict;
  }
}
const refuse = (verdict: AuthorityVerdict) => new Refused(verdict);

/** The principal's `disabled_at` as its authentication reads it (a JavaScript Date: whole ms). */
async function disabledAtMs(principalId: string): Promise<number | undefined> {
  const r = await db.pool.query<{ disabled_at: Date | null }>(
    'SELECT disabled_at FROM arkvory_principals WHERE id = $1',
    [principalId],
  );
  return r.rows[0]?.disabled_at?.getTime();
}

async function asRequest(account: ServiceAccount): Promise<PublishAuthority> {
  return {
    kind: 'request',
    principalId: account.principalId,
    keyId: account.keyId,
    disabledAtMs: await disabledAtMs(account.principalId),
    refuse,
  };
}

/** A reservation the insert would settle. */
async function reserve(principalId: string | null): Promise<string> {
  const id = randomUUID();
  await db.pool.query(
    `INSERT INTO arkvory_quota_reservations (id, repository, principal_id, bytes, expires_at) VALUES ($1, $2, $3, 1, now() + interval '1 hour')`,
    [id, repository, principalId],
  );
  return id;
}

async function published(name: string): Promise<boolean> {
  const r = await db.pool.query('SELECT 1 FROM arkvory_artifacts WHERE repository = $1 AND name = $2', [
    repository,
    name,
  ]);
  return r.rowCount === 1;
}

async function reserved(id: string): Promise<boolean> {
  return (await db.pool.query('SELECT 1 FROM arkvory_quota_reservations WHERE id = $1', [id])).rowCount === 1;
}

/** Inserts `name` with `authority`; the refusal's verdict, or `ok` once inserted. */
async function insert(name: string, authority: PublishAuthority, reservation: string): Promise<string> {
  try {
    const r = await createCatalog(db.pool).insertOrGet(artifactEntry(repository, name, 'a'), {
      authority,
      settleReservation: reservation,
    });
    expect(r.inserted).toBe(true);
    return 'ok';
  } catch (err) {
    if (err instanceof Refused) return err.verdict;
    throw err;
  }
}

describe('the catalog insert refuses a publisher revoked since the last check', () => {
  let admin: AdminStore;
  const writer = () => createServiceAccount(db.pool, { grants: { [repository]: 'write' } });
  beforeAll(async () => {
    await createRepository(db.pool, repository);
    admin = new AdminStore(db.pool);
  });

  it('an upload: key revoked, principal disabled or disabled and enabled again, grant lowered or removed, key without write', async () => {
    const cases: Array<{
      name: string;
      change: (a: ServiceAccount) => Promise<unknown>;
      verdict: string;
      scopes?: ('read' | 'write')[];
    }> = [
      { name: 'unchanged', change: async () => {}, verdict: 'ok' },
      { name: 'key-revoked', change: (a) => admin.revokeKey(a.keyId), verdict: 'unauthorized' },
      { name: 'disabled', change: (a) => admin.setPrincipalDisabled(a.principalId, true), verdict: 'unauthorized' },
      {
        name: 'disabled-and-enabled',
        change: async (a) => {
          await admin.setPrincipalDisabled(a.principalId, true);
          await admin.setPrincipalDisabled(a.principalId, false);
        },
        verdict: 'unauthorized',
      },
      { name: 'lowered', change: (a) => admin.addGrant(a.principalId, repository, 'read'), verdict: 'forbidden' },
      { name: 'removed', change: (a) => admin.removeGrant(a.principalId, repository), verdict: 'not_found' },
    ];
    for (const c of cases) {
      const account = await writer();
      const authority = await asRequest(account);
      const reservation = await reserve(account.principalId);
      await c.change(account);
      expect(await insert(c.name, authority, reservation), c.name).toBe(c.verdict);
      expect(await published(c.name), c.name).toBe(c.verdict === 'ok');
      // Refused: the reservation is not settled by the statement (its owner releases it).
      expect(await reserved(reservation), c.name).toBe(c.verdict !== 'ok');
    }
    // A key of the principal without the write scope (the auth gate would not have let it write).
    const reader = await createServiceAccount(db.pool, { scopes: ['read'], grants: { [repository]: 'write' } });
    expect(await insert('read-scope', await asRequest(reader), await reserve(reader.principalId))).toBe('forbidden');
    // A key of another principal named with this one.
    const other = await writer();
    const mixed = { ...(await asRequest(other)), keyId: reader.keyId };
    expect(await insert('mixed', mixed, await reserve(other.principalId))).toBe('unauthorized');
    expect(await published('read-scope')).toBe(false);
    expect(await published('mixed')).toBe(false);
  });

  it('a multipart session: its principal disabled since it was opened (even if enabled again), its grant lowered or removed', async () => {
    const open = async (principalId: string, name: string) => {
      const id = randomUUID();
      await db.pool.query(
        `INSERT INTO arkvory_upload_sessions (id, repository, kind, name, content_type, principal_id, state, expires_at)
         VALUES ($1, $2, 'artifact', $3, 'application/octet-stream', $4, 'completing', now() + interval '1 hour')`,
        [id, repository, name, principalId],
      );
      return id;
    };
    const cases: Array<{ name: string; change: (a: ServiceAccount) => Promise<unknown>; verdict: string }> = [
      { name: 's-unchanged', change: async () => {}, verdict: 'ok' },
      // A session records its principal, not its key.
      { name: 's-key-revoked', change: (a) => admin.revokeKey(a.keyId), verdict: 'ok' },
      {
        name: 's-disabled-and-enabled',
        change: async (a) => {
          await admin.setPrincipalDisabled(a.principalId, true);
          await admin.setPrincipalDisabled(a.principalId, false);
        },
        verdict: 'unauthorized',
      },
      { name: 's-lowered', change: (a) => admin.addGrant(a.principalId, repository, 'read'), verdict: 'forbidden' },
      { name: 's-removed', change: (a) => admin.removeGrant(a.principalId, repository), verdict: 'forbidden' },
    ];
    for (const c of cases) {
      const account = await writer();
      // Disabled and enabled before the session was opened: that does not void it.
      if (c.name === 's-unchanged') {
        await admin.setPrincipalDisabled(account.principalId, true);
        await admin.setPrincipalDisabled(account.principalId, false);
      }
      const session = await open(account.principalId, c.name);
      const reservation = await reserve(account.principalId);
      await c.change(account);
      expect(await insert(c.name, { kind: 'session', sessionId: session, refuse }, reservation), c.name).toBe(
        c.verdict,
      );
      expect(await published(c.name), c.name).toBe(c.verdict === 'ok');
    }
  });
});
