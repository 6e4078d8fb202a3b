import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { loadConfig } from './config.ts';
import { readSecretFile } from './secret-files.ts';
import { type SecretVerifier, SecretRotation, type StartSecrets } from './secret-rotation.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'arkvory-rotation-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A private secret file, replaced the way an operator or kubelet does: a new file renamed over the old. */
function writeSecret(file: string, content: string, mode = 0o600): void {
  const tmp = `${file}.tmp${n++}`;
  writeFileSync(tmp, content, { mode: 0o600 });
  chmodSync(tmp, mode);
  renameSync(tmp, file);
}

function secretFile(content: string): string {
  const file = path.join(dir, `secret-${n++}`);
  writeSecret(file, content);
  return file;
}

/** Loads the configuration as `arkvory serve` does, recording what each file held at start. */
function start(env: Record<string, string>): { rotationOf: (o?: Partial<Options>) => SecretRotation; logs: Log[] } {
  const reads = new Map<string, string>();
  const config = loadConfig(env, undefined, (file) => {
    const v = readSecretFile(file);
    reads.set(file, v);
    return v;
  });
  const secrets: StartSecrets = { env, reads };
  const logs: Log[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s) as Log) });
  return {
    logs,
    rotationOf: (o = {}) => {
      const r = new SecretRotation(config, secrets, { log, ...o });
      onTestFinished(() => r.close());
      return r;
    },
  };
}

type Options = ConstructorParameters<typeof SecretRotation>[2];
type Log = { level: number; msg: string; variable?: string; reason?: string; code?: string };

const URL_BASE = 'postgres://gw@db.example:5432/arkvory';
const passwordOf = (r: SecretRotation) => decodeURIComponent(new URL(r.config.databaseUrl!).password);

/** A verifier that refuses while `refuse` holds a reason. */
function databaseVerifier(state: { refuse: string | undefined; calls: number }): SecretVerifier {
  return {
    what: 'PostgreSQL',
    variables: ['ARKVORY_DATABASE_URL', 'ARKVORY_DATABASE_PASSWORD'],
    changed: (a, b) => a.databaseUrl !== b.databaseUrl,
    async verify() {
      state.calls++;
      if (state.refuse !== undefined) throw new Error(state.refuse);
    },
  };
}

describe('secret rotation', () => {
  it('takes a changed file on reload: the configuration has the new value, the rotation is counted and logged without it', async () => {
    const pw = secretFile('first-pw-1\n');
    const token = secretFile('metrics-token-1');
    const { rotationOf, logs } = start({
      ARKVORY_DATABASE_URL: URL_BASE,
      ARKVORY_DATABASE_PASSWORD_FILE: pw,
      ARKVORY_METRICS_TOKEN_FILE: token,
    });
    const r = rotationOf();
    expect(passwordOf(r)).toBe('first-pw-1');
    expect(await r.reload('SIGHUP')).toEqual({ rotated: [], failed: [] });

    writeSecret(pw, 'second-pw-2\n');
    const before = r.config;
    const seen: string[][] = [];
    r.onRotated((previous, next, rotated) => {
      expect(previous).toBe(before);
      expect(next).toBe(r.config);
      seen.push([...rotated]);
    });
    expect(await r.reload('SIGHUP')).toEqual({ rotated: ['ARKVORY_DATABASE_PASSWORD'], failed: [] });
    expect(passwordOf(r)).toBe('second-pw-2');
    expect(r.config.metrics.token).toBe('metrics-token-1');
    expect(seen).toEqual([['ARKVORY_DATABASE_PASSWORD']]);
    expect(Object.fromEntries(r.rotations)).toEqual({ ARKVORY_DATABASE_PASSWORD: 1, ARKVORY_METRICS_TOKEN: 0 });
    expect(Object.fromEntries(r.failures)).toEqual({ ARKVORY_DATABASE_PASSWORD: 0, ARKVORY_METRICS_TOKEN: 0 });
    expect(logs.find((l) => l.variable === 'ARKVORY_DATABASE_PASSWORD')?.msg).toMatch(/rotated/);
    expect(JSON.stringify(logs)).not.toMatch(/first-pw|second-pw|metrics-token/);
  });

  it('an unreadable, loose or malformed new file keeps the old value, warns naming the variable and counts a failure', async () => {
    const pw = secretFile('good-pw');
    const url = secretFile(URL_BASE.replace('gw@', 'gw:url-pw@'));
    const { rotationOf, logs } = start({ ARKVORY_DATABASE_URL_FILE: url, ARKVORY_RULES_SERVICE_TOKEN_FILE: pw });
    const r = rotationOf();
    const kept = r.config;

    writeSecret(pw, 'loose-new-token', 0o644);
    writeSecret(url, 'not a url with-secret-inside');
    const outcome = await r.reload('SIGHUP');
    expect(outcome.rotated).toEqual([]);
    expect(outcome.failed.map((f) => f.secret).sort()).toEqual(['ARKVORY_DATABASE_URL', 'ARKVORY_RULES_SERVICE_TOKEN']);
    expect(outcome.failed.find((f) => f.secret === 'ARKVORY_RULES_SERVICE_TOKEN')?.reason).toMatch(
      /^ARKVORY_RULES_SERVICE_TOKEN_FILE: .* is accessible to group or others \(mode 0644\)/,
    );
    expect(outcome.failed.find((f) => f.secret === 'ARKVORY_DATABASE_URL')?.reason).toMatch(/^ARKVORY_DATABASE_URL: /);
    expect(r.config).toBe(kept);
    expect(r.config.rulesService.token).toBe('good-pw');
    expect(Object.fromEntries(r.failures)).toEqual({ ARKVORY_DATABASE_URL: 1, ARKVORY_RULES_SERVICE_TOKEN: 1 });
    // The same files again (a SIGHUP after the change event read them): one failure each, still.
    expect((await r.reload('SIGHUP')).failed).toHaveLength(2);
    expect(Object.fromEntries(r.failures)).toEqual({ ARKVORY_DATABASE_URL: 1, ARKVORY_RULES_SERVICE_TOKEN: 1 });
    const warnings = logs.filter((l) => l.code === 'secret_rotation_failed');
    expect(warnings.map((w) => w.level)).toEqual([40, 40]);
    expect(warnings.every((w) => /the previous value stays in use/.test(w.msg))).toBe(true);

    rmSync(pw);
    const gone = await r.reload('SIGHUP');
    expect(gone.failed.find((f) => f.secret === 'ARKVORY_RULES_SERVICE_TOKEN')?.reason).toMatch(/cannot read .*ENOENT/);
    expect(r.config.rulesService.token).toBe('good-pw');
    expect(JSON.stringify(logs)).not.toMatch(/good-pw|loose-new-token|url-pw|with-secret-inside/);

    // Sound again: taken, and the standing failures clear.
    writeSecret(pw, 'fixed-token');
    writeSecret(url, URL_BASE.replace('gw@', 'gw:url-pw-2@'));
    expect([...(await r.reload('SIGHUP')).rotated].sort()).toEqual([
      'ARKVORY_DATABASE_URL',
      'ARKVORY_RULES_SERVICE_TOKEN',
    ]);
    expect(r.config.rulesService.token).toBe('fixed-token');
  });

  it("a metrics token file rewritten with an example's placeholder keeps the token in use", async () => {
    const token = secretFile('9f86d081884c7d659a2feaa0c55ad015');
    const { rotationOf } = start({ ARKVORY_METRICS_TOKEN_FILE: token });
    const r = rotationOf();
    writeSecret(token, 'change-me-metrics-token\n');
    const outcome = await r.reload('SIGHUP');
    expect(outcome.rotated).toEqual([]);
    expect(outcome.failed.map((f) => f.reason)).toEqual([
      expect.stringMatching(/^ARKVORY_METRICS_TOKEN: an example's placeholder/),
    ]);
    expect(r.config.metrics.token).toBe('9f86d081884c7d659a2feaa0c55ad015');
  });

  it('a credential its server refuses is kept out; the poll retries it quietly and takes it once accepted', async () => {
    const pw = secretFile('pw-1');
    const { rotationOf, logs } = start({ ARKVORY_DATABASE_URL: URL_BASE, ARKVORY_DATABASE_PASSWORD_FILE: pw });
    const state = { refuse: 'password authentication failed for user "gw"' as string | undefined, calls: 0 };
    const r = rotationOf({ verifiers: [databaseVerifier(state)] });
    writeSecret(pw, 'pw-2');
    const refused = await r.reload('file change');
    expect(refused.rotated).toEqual([]);
    expect(refused.failed).toEqual([
      {
        secret: 'ARKVORY_DATABASE_PASSWORD',
        reason: 'PostgreSQL refused the new value: password authentication failed for user "gw"',
      },
    ]);
    expect(passwordOf(r)).toBe('pw-1');
    // A retry with the same refusal: tried again, neither logged nor counted again.
    await r.reload('retry');
    expect(state.calls).toBe(2);
    expect(r.failures.get('ARKVORY_DATABASE_PASSWORD')).toBe(1);
    expect(logs.filter((l) => l.code === 'secret_rotation_failed')).toHaveLength(1);
    // The password changed on the server meanwhile: the next retry takes it.
    state.refuse = undefined;
    expect((await r.reload('retry')).rotated).toEqual(['ARKVORY_DATABASE_PASSWORD']);
    expect(passwordOf(r)).toBe('pw-2');
    // Unchanged since: nothing to verify.
    await r.reload('SIGHUP');
    expect(state.calls).toBe(3);
  });

  it('a change in the files directory is picked up after the debounce, without a signal', async () => {
    const pw = secretFile('watched-1');
    const { rotationOf } = start({ ARKVORY_DATABASE_URL: URL_BASE, ARKVORY_DATABASE_PASSWORD_FILE: pw });
    const r = rotationOf({ debounceMs: 20, pollIntervalMs: 60_000 });
    await r.start();
    writeSecret(pw, 'watched-2');
    await vi.waitFor(() => expect(passwordOf(r)).toBe('watched-2'), { timeout: 5000, interval: 20 });
    expect(r.rotations.get('ARKVORY_DATABASE_PASSWORD')).toBe(1);
  });

  it('the Redis password and URL files rotate: checked by their verifier, refused ones kept', async () => {
    const redisPw = secretFile('redis-1');
    const { rotationOf, logs } = start({
      ARKVORY_REDIS_URL: 'redis://arkvory@127.0.0.1:6379',
      ARKVORY_REDIS_PASSWORD_FILE: redisPw,
    });
    const state = { refuse: 'WRONGPASS invalid username-password pair' as string | undefined, checked: [] as string[] };
    const r = rotationOf({
      verifiers: [
        {
          what: 'Redis',
          variables: ['ARKVORY_REDIS_URL', 'ARKVORY_REDIS_PASSWORD'],
          changed: (a, b) => a.redisUrl !== b.redisUrl,
          async verify(next) {
            state.checked.push(new URL(next.redisUrl!).password);
            if (state.refuse !== undefined) throw new Error(state.refuse);
          },
        },
      ],
    });
    expect(Object.fromEntries(r.rotations)).toEqual({ ARKVORY_REDIS_PASSWORD: 0 });
    writeSecret(redisPw, 'redis-2');
    expect((await r.reload('SIGHUP')).failed).toEqual([
      {
        secret: 'ARKVORY_REDIS_PASSWORD',
        reason: 'Redis refused the new value: WRONGPASS invalid username-password pair',
      },
    ]);
    expect(new URL(r.config.redisUrl!).password).toBe('redis-1');
    expect(r.failures.get('ARKVORY_REDIS_PASSWORD')).toBe(1);
    state.refuse = undefined;
    expect((await r.reload('retry')).rotated).toEqual(['ARKVORY_REDIS_PASSWORD']);
    expect(state.checked).toEqual(['redis-2', 'redis-2']);
    // The user of the URL stays; the password file replaces the password.
    expect(new URL(r.config.redisUrl!).username).toBe('arkvory');
    expect(new URL(r.config.redisUrl!).password).toBe('redis-2');
    expect(r.rotations.get('ARKVORY_REDIS_PASSWORD')).toBe(1);
    expect(JSON.stringify(logs)).not.toMatch(/redis-1|redis-2/);
  });

  it('a Redis URL file rotates on its own too (new credentials for the same servers)', async () => {
    const redisUrl = secretFile('redis://u:one@127.0.0.1:7000,redis://u:one@127.0.0.1:7001');
    const { rotationOf } = start({ ARKVORY_REDIS_URL_FILE: redisUrl });
    const r = rotationOf();
    writeSecret(redisUrl, 'redis://u:two@127.0.0.1:7000,redis://u:two@127.0.0.1:7001');
    expect(await r.reload('SIGHUP')).toEqual({ rotated: ['ARKVORY_REDIS_URL'], failed: [] });
    expect(r.config.redisUrl).toBe('redis://u:two@127.0.0.1:7000,redis://u:two@127.0.0.1:7001');
  });
});
