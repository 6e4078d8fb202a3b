/** `arkvory quota …` against a real database: set, show, list, unset, and the usage errors. */
import { describe, expect, it } from 'vitest';
import { createCatalog } from '../../storage-adapter/catalog/catalog.ts';
import { createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { runCli } from '../../test/support/gateway.ts';

const db = useTestDatabase();

describe('arkvory quota', () => {
  it('sets, shows, lists and unsets quotas of a repository and a principal (by name)', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    await createRepository(db.pool, 'cli-quota');
    const { principalId, name } = await createServiceAccount(db.pool);
    await createCatalog(db.pool).insertOrGet({
      repository: 'cli-quota',
      kind: 'artifact',
      name: 'a',
      version: '',
      asset: '',
      sha256: 'b'.repeat(64),
      sizeBytes: 1000,
      contentType: 'application/octet-stream',
      publishedBy: principalId,
    });
    const json = async (args: string[]) => {
      const r = await runCli(['quota', ...args], env);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as Record<string, unknown>;
    };
    expect(await json(['set', '--repository', 'cli-quota', '--bytes', '2K'])).toEqual({
      scope: 'repository',
      subject: 'cli-quota',
      limitBytes: 2048,
      storedBytes: 1000,
      reservedBytes: 0,
      usageBytes: 1000,
      remainingBytes: 1048,
    });
    expect(await json(['set', '--principal', name, '--bytes', '00'])).toMatchObject({
      scope: 'principal',
      subject: principalId,
      limitBytes: 0,
      storedBytes: 1000,
      remainingBytes: 0,
    });
    expect(await json(['show', '--principal', principalId])).toMatchObject({ limitBytes: 0 });
    const listed = (await json(['list'])).quotas as Array<{ scope: string; subject: string }>;
    expect(listed.map((q) => `${q.scope}:${q.subject}`)).toEqual(['repository:cli-quota', `principal:${principalId}`]);
    expect(await json(['unset', '--repository', 'cli-quota'])).toEqual({
      removed: { scope: 'repository', subject: 'cli-quota' },
    });
    expect(await json(['show', '--repository', 'cli-quota'])).toMatchObject({ limitBytes: null, remainingBytes: null });

    const again = await runCli(['quota', 'unset', '--repository', 'cli-quota'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('no repository quota is set for cli-quota');
    const nobody = await runCli(['quota', 'show', '--principal', 'no-such-principal'], env);
    expect(nobody.code).toBe(1);
    expect(nobody.stderr).toBe('arkvory: not_found: no principal "no-such-principal"\n');
    const both = await runCli(['quota', 'show', '--principal', name, '--repository', 'cli-quota'], env);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('give either --repository or --principal');
    const typo = await runCli(['quota', 'set', '--repository', 'cli-quotas', '--bytes', '1M'], env);
    expect({ code: typo.code, stdout: typo.stdout, stderr: typo.stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: 'arkvory: not_found: no repository cli-quotas\n',
    });
    expect((await db.pool.query(`SELECT 1 FROM arkvory_storage_quotas WHERE subject = 'cli-quotas'`)).rowCount).toBe(0);
    const typoShown = await runCli(['quota', 'show', '--repository', 'cli-quotas'], env);
    expect({ code: typoShown.code, stdout: typoShown.stdout, stderr: typoShown.stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: 'arkvory: not_found: no repository cli-quotas\n',
    });
    const badSize = await runCli(['quota', 'set', '--repository', 'cli-quota', '--bytes', 'lots'], env);
    expect(badSize.code).toBe(2);
    expect(badSize.stderr).toContain('is not a size');
  });

  it('a whole key where --principal belongs (the owner of a leaked key) is not found and never quoted back', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const leaked = await createServiceAccount(db.pool, { scopes: ['read'] });
    const secret = leaked.key.slice(`ark_${leaked.keyId}_`.length);
    for (const args of [
      ['show', '--principal', leaked.key],
      ['set', '--principal', leaked.key, '--bytes', '1G'],
      ['unset', '--principal', leaked.key],
    ]) {
      const r = await runCli(['quota', ...args], env);
      expect([r.code, r.stdout, r.stderr], args[0]).toEqual([
        1,
        '',
        'arkvory: not_found: no principal by that reference (a principal is named by its id or its name, not by one of its keys)\n',
      ]);
      expect(r.stderr).not.toContain(secret);
    }
  });
});
