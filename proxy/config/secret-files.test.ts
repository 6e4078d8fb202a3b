import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type ConfigError, loadConfig } from './config.ts';
import { readSecretFile, resolveSecretFiles } from './secret-files.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'arkvory-secrets-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
function secretFile(name: string, content: string, mode = 0o400): string {
  const file = path.join(dir, name);
  writeFileSync(file, content, { mode: 0o600 });
  chmodSync(file, mode);
  return file;
}

describe('secret files', () => {
  it('reads a private file without its trailing newline', () => {
    expect(readSecretFile(secretFile('a', 's3cret-a\n'))).toBe('s3cret-a');
    expect(readSecretFile(secretFile('b', 'x\r\n', 0o600))).toBe('x');
  });

  it('refuses group- or world-accessible, empty, missing and non-regular files, never quoting the content', () => {
    for (const mode of [0o440, 0o404, 0o640, 0o644, 0o420]) {
      const file = secretFile(`loose-${mode.toString(8)}`, 'hunter2-loose', mode);
      expect(() => readSecretFile(file)).toThrow(/accessible to group or others.*chmod 0400/);
      try {
        readSecretFile(file);
      } catch (err) {
        expect((err as Error).message).not.toContain('hunter2');
      }
    }
    expect(() => readSecretFile(secretFile('empty', '\n'))).toThrow(/is empty/);
    expect(() => readSecretFile(path.join(dir, 'missing'))).toThrow(/cannot read .*ENOENT/);
    expect(() => readSecretFile(dir)).toThrow(/not a regular file/);
  });

  it('fills each variable from its file form and records the source; both forms at once is a problem', () => {
    const r = resolveSecretFiles(
      {
        ARKVORY_REDIS_PASSWORD_FILE: '/x',
        ARKVORY_METRICS_TOKEN: 'tok',
        ARKVORY_RULES_SERVICE_TOKEN: 'a',
        ARKVORY_RULES_SERVICE_TOKEN_FILE: '/y',
      },
      (file) => `from ${file}`,
    );
    expect(r.env.ARKVORY_REDIS_PASSWORD).toBe('from /x');
    expect(r.env.ARKVORY_REDIS_PASSWORD_FILE).toBeUndefined();
    expect(r.sources).toMatchObject({
      ARKVORY_REDIS_PASSWORD: 'file',
      ARKVORY_METRICS_TOKEN: 'env',
      ARKVORY_DATABASE_URL: 'unset',
    });
    expect(r.problems).toEqual([
      'ARKVORY_RULES_SERVICE_TOKEN_FILE: ARKVORY_RULES_SERVICE_TOKEN is set too; give the secret one way only',
    ]);
  });

  it('loadConfig: a password file completes the URL; a loose file is one problem line naming the file, not the secret', () => {
    const pw = secretFile('pg', 'pa ss/word\n');
    const config = loadConfig({
      ARKVORY_DATABASE_URL: 'postgres://gw@db.example:5432/arkvory',
      ARKVORY_DATABASE_PASSWORD_FILE: pw,
    });
    expect(new URL(config.databaseUrl!).password).toBe(encodeURIComponent('pa ss/word'));
    expect(config.secretSources.ARKVORY_DATABASE_PASSWORD).toBe('file');
    const loose = secretFile('pg-loose', 'topsecret-pw', 0o644);
    let problems: readonly string[] = [];
    try {
      loadConfig({ ARKVORY_DATABASE_URL: 'postgres://gw@db/arkvory', ARKVORY_DATABASE_PASSWORD_FILE: loose });
    } catch (err) {
      problems = (err as ConfigError).problems;
    }
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(
      /^ARKVORY_DATABASE_PASSWORD_FILE: .*pg-loose is accessible to group or others \(mode 0644\)/,
    );
    expect(problems.join()).not.toContain('topsecret');
    expect(() => loadConfig({ ARKVORY_DATABASE_PASSWORD: 'p' })).toThrow(/only used with ARKVORY_DATABASE_URL/);
  });
});
