import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, runCli } from '../../test/support/gateway.ts';
import { useTestRedis } from '../../test/support/redis.ts';
import { loadRuleFiles } from '../gates/rate-limit-rule-files.ts';

const redis = useTestRedis();
const db = useTestDatabase();

async function file(name: string, text: string): Promise<string> {
  const dir = await makeTempDir('arkvory-rules-cli-');
  const p = path.join(dir, name);
  await writeFile(p, text);
  return p;
}

const rule = (body: string) => `rate_limits:\n  gateway_request:\n    - name: ok_rule\n      action: skip\n${body}`;

describe('arkvory ratelimit validate', () => {
  it.each([
    ['bad name', '    - name: Bad-Name\n      action: skip\n', 5, 'name must match ^[a-z0-9_]{1,64}$'],
    ['missing name', '    - action: skip\n', 5, 'name is required'],
    ['duplicate name', '    - name: ok_rule\n      action: skip\n', 5, 'names must be unique per limiter'],
    ['missing action', '    - name: r\n      limit: 1\n', 5, 'action is required'],
    ['unknown action', '    - name: r\n      action: block\n', 6, 'action must be one of limit, log, skip'],
    [
      'limit without period_s',
      '    - name: r\n      action: limit\n      limit: 5\n',
      5,
      'limit and log rules require limit and period_s',
    ],
    [
      'log without limit',
      '    - name: r\n      action: log\n      period_s: 5\n',
      5,
      'limit and log rules require limit and period_s',
    ],
    [
      'ban with count_distinct',
      '    - name: r\n      action: limit\n      limit: 1\n      period_s: 1\n      count_distinct: ip\n      ban_for_s: 9\n',
      10,
      'ban_for_s cannot be combined with count_distinct',
    ],
    [
      'ban on skip',
      '    - name: r\n      action: skip\n      ban_for_s: 9\n',
      7,
      'ban_for_s is not valid on skip rules',
    ],
    [
      'unknown characteristic',
      '    - name: r\n      action: limit\n      limit: 1\n      period_s: 1\n      characteristics: [user]\n',
      9,
      'characteristic "user" is not an available property',
    ],
    [
      'unknown match property',
      '    - name: r\n      action: skip\n      match:\n        plan: free\n',
      8,
      'match property "plan" is not an available property',
    ],
    [
      'unknown count_distinct property',
      '    - name: r\n      action: limit\n      limit: 1\n      period_s: 1\n      count_distinct: user\n',
      9,
      'count_distinct "user" is not an available property',
    ],
    [
      'bad regex',
      '    - name: r\n      action: skip\n      match:\n        route:\n          regex: "(["\n',
      9,
      'invalid regular expression',
    ],
    ['unknown field', '    - name: r\n      action: skip\n      limt: 4\n', 7, 'unknown field "limt"'],
    [
      'negative limit',
      '    - name: r\n      action: limit\n      limit: -1\n      period_s: 1\n',
      7,
      'limit must be an integer',
    ],
  ])('rejects %s with file:line', async (_what, body, line, message) => {
    const p = await file('rate_limits.yaml', rule(body));
    const result = await runCli(['ratelimit', 'validate', p], {});
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`${p}:${line}: `);
    expect(result.stderr).toContain(message);
  });

  it('rejects an unknown limiter and broken YAML with their lines', async () => {
    const unknown = await file(
      'a.yaml',
      'rate_limits:\n  gateway_request: []\n  nope:\n    - name: x\n      action: skip\n',
    );
    const r1 = await runCli(['ratelimit', 'validate', unknown], {});
    expect(r1.code).toBe(1);
    expect(r1.stderr).toContain(`${unknown}:3: rate_limits.nope: unknown limiter "nope"`);
    const broken = await file('b.yaml', 'rate_limits:\n  gateway_request:\n    - name: x\n     action: [\n');
    const r2 = await runCli(['ratelimit', 'validate', broken], {});
    expect(r2.code).toBe(1);
    expect(r2.stderr).toMatch(new RegExp(`${broken.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}:\\d+: .*YAML`));
  });

  it('ships an available_limiters.yaml that validates, with exactly the gateway limiters and properties', async () => {
    const { available } = await loadRuleFiles(undefined);
    expect([...available.keys()]).toEqual(['gateway_request', 'auth_failure', 'transfer_bytes']);
    expect(available.get('gateway_request')!.available_properties).toEqual([
      'principal',
      'ip',
      'method',
      'repository',
      'route',
      'request_type',
    ]);
    expect(available.get('auth_failure')!.default_rules[0]).toMatchObject({ ban_for_s: 900, characteristics: ['ip'] });
  });

  it('accepts the shipped example', async () => {
    const example = await runCli(['ratelimit', 'validate', 'deploy/rate_limits.example.yaml'], {});
    expect(example.stderr).toBe('');
    expect(example.code).toBe(0);
    expect(example.stdout).toMatch(/ok \(\d+ rule\(s\) for 3 limiter\(s\)\)/);
  });
});

describe('arkvory ratelimit publish / unpublish / show', () => {
  it('publishes to Redis, shows tiers, unpublishes, and refuses unknown rules', async () => {
    const env = {
      ARKVORY_REDIS_URL: redis.url,
      ARKVORY_REDIS_KEY_PREFIX: `${redis.prefix}cli:`,
      ARKVORY_DATABASE_URL: db.url,
    };
    const p = await file(
      'publish.yaml',
      'rate_limits:\n  transfer_bytes:\n    - name: bytes_per_principal_per_day\n      action: limit\n      characteristics: [principal]\n      limit: 10000000000\n      period_s: 86400\n',
    );
    const published = await runCli(['ratelimit', 'publish', p], env);
    expect(published.stderr).toBe('');
    expect(JSON.parse(published.stdout)).toEqual({ published: { limiters: ['transfer_bytes'], rules: 1 } });
    const shown = await runCli(['ratelimit', 'show', 'transfer_bytes'], env);
    expect(shown.code).toBe(0);
    const view = JSON.parse(shown.stdout) as {
      limiters: Array<{
        source: string;
        tiers: { published_rules: { rules: Array<{ name: string; limit: number }> } };
      }>;
    };
    expect(view.limiters[0]!.source).toBe('store');
    expect(view.limiters[0]!.tiers.published_rules.rules).toEqual([
      expect.objectContaining({ name: 'bytes_per_principal_per_day', limit: 10000000000 }),
    ]);
    expect(await redis.client.exists(`${redis.prefix}cli:ratelimit:rules:transfer_bytes`)).toBe(1);
    expect((await runCli(['ratelimit', 'unpublish', 'transfer_bytes', 'bytes_per_principal_per_day'], env)).code).toBe(
      0,
    );
    const again = await runCli(['ratelimit', 'unpublish', 'transfer_bytes', 'bytes_per_principal_per_day'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('has no published rule "bytes_per_principal_per_day"');
    const bad = await file('bad.yaml', 'rate_limits:\n  transfer_bytes:\n    - name: x\n      action: limit\n');
    const refused = await runCli(['ratelimit', 'publish', bad], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`${bad}:3:`);
    // A file with no rules publishes nothing: refused (exit 1, saying how rules are removed), not "published".
    const empty = await file('empty.yaml', 'rate_limits:\n  transfer_bytes: []\n');
    const nothing = await runCli(['ratelimit', 'publish', empty], env);
    expect([nothing.code, nothing.stdout]).toEqual([1, '']);
    expect(nothing.stderr).toContain('an empty list publishes nothing');
  });
});

describe('arkvory ratelimit with Redis down', () => {
  it('show, publish and unpublish fail with one redis_unreachable line naming Redis without its password, exit 1', async () => {
    const p = await file('down.yaml', 'rate_limits:\n  gateway_request:\n    - name: r\n      action: skip\n');
    const env = { ARKVORY_REDIS_URL: 'redis://:s3cret-pw@127.0.0.1:1', ARKVORY_DATABASE_URL: db.url };
    for (const args of [['show'], ['publish', p], ['unpublish', 'gateway_request', 'r']]) {
      const result = await runCli(['ratelimit', ...args], env);
      const lines = result.stderr.split('\n').filter((l) => l && !l.startsWith('{'));
      expect([result.code, result.stdout, lines], args.join(' ')).toEqual([
        1,
        '',
        [
          expect.stringMatching(
            /^arkvory: redis_unreachable: Redis at redis:\/\/<redacted>@127\.0\.0\.1:1 did not answer: /,
          ),
        ],
      ]);
      expect(result.stderr).not.toContain('s3cret-pw');
    }
  });
});

describe('arkvory ratelimit with its PostgreSQL rule store cut inside the COMMIT', () => {
  it('publish and unpublish exit 4 with store_outcome_unknown, and are audited with outcome unknown', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url };
    const p = await file(
      'cut.yaml',
      'rate_limits:\n  gateway_request:\n    - name: cut_rule\n      action: log\n      characteristics: [ip]\n      limit: 1000\n      period_s: 60\n',
    );
    expect((await runCli(['ratelimit', 'publish', p], env)).code).toBe(0);
    // A deferred trigger runs inside the COMMIT; it ends its own session there.
    await db.pool.query(`CREATE OR REPLACE FUNCTION arkvory_test_cut_cli() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$`);
    await db.pool.query(`CREATE CONSTRAINT TRIGGER arkvory_test_cut_commit AFTER INSERT OR UPDATE ON arkvory_rate_limit_rules
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION arkvory_test_cut_cli()`);
    try {
      for (const args of [
        ['publish', p],
        ['unpublish', 'gateway_request', 'cut_rule'],
      ]) {
        const result = await runCli(['ratelimit', ...args], env);
        expect([result.code, result.stdout], args.join(' ')).toEqual([4, '']);
        expect(result.stderr).toContain(`arkvory ratelimit ${args[0]}: store_outcome_unknown:`);
      }
    } finally {
      await db.pool.query('DROP TRIGGER IF EXISTS arkvory_test_cut_commit ON arkvory_rate_limit_rules');
    }
    // Before, neither left a row, though either may have landed.
    const audited = await db.pool.query(
      `SELECT action, source, target, details FROM arkvory_audit_events WHERE details->>'outcome' = 'unknown' ORDER BY id`,
    );
    expect(audited.rows).toEqual([
      {
        action: 'rate_limit.publish',
        source: 'cli',
        target: { file: p },
        details: { outcome: 'unknown', names: { gateway_request: ['cut_rule'] } },
      },
      {
        action: 'rate_limit.unpublish',
        source: 'cli',
        target: { limiter: 'gateway_request', rule: 'cut_rule' },
        details: { outcome: 'unknown' },
      },
    ]);
    await db.pool.query(`DELETE FROM arkvory_rate_limit_rules WHERE limiter = 'gateway_request'`);
  });
});
