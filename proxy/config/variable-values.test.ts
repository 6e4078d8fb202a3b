import { describe, expect, it } from 'vitest';
import { describeAllowed, shown, VariableValues } from './variable-values.ts';
import { VARIABLES } from './variables.ts';

const spec = (name: string) => VARIABLES.find((v) => v.name === name)!;

/** The problems of an environment holding only `env`. */
const problemsOf = (env: Record<string, string>) => new VariableValues(env).problems;

describe('VariableValues', () => {
  it('an unset variable takes its default, and so does an empty one; one without a default stays unset', () => {
    for (const port of [undefined, '']) {
      const v = new VariableValues(port === undefined ? {} : { ARKVORY_PORT: port });
      expect(v.problems).toEqual([]);
      expect(v.num('ARKVORY_PORT')).toBe(8080);
    }
    const v = new VariableValues({});
    expect(v.optStr('ARKVORY_DATABASE_URL')).toBeUndefined();
    expect(v.str('ARKVORY_HOST')).toBe('127.0.0.1');
  });

  it('integers: the bounds themselves pass; beyond them, signs, leading zeros and exponents do not', () => {
    expect(new VariableValues({ ARKVORY_PORT: '65535' }).num('ARKVORY_PORT')).toBe(65535);
    expect(new VariableValues({ ARKVORY_PORT: '0' }).num('ARKVORY_PORT')).toBe(0);
    for (const bad of ['65536', '-1', '08080', '8e3', '8080.0', ' 8080', '9007199254740993']) {
      expect(problemsOf({ ARKVORY_PORT: bad })).toEqual([
        `ARKVORY_PORT: expected an integer from 0 to 65535, got ${JSON.stringify(bad)}`,
      ]);
    }
  });

  it('strings: anything but a NUL byte', () => {
    expect(new VariableValues({ ARKVORY_HOST: '::1' }).str('ARKVORY_HOST')).toBe('::1');
    expect(problemsOf({ ARKVORY_HOST: 'a\0b' })).toEqual([
      'ARKVORY_HOST: expected a non-empty string, got "a\\u0000b"',
    ]);
  });

  it('booleans: 1/true and 0/false, nothing else', () => {
    const name = 'ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE';
    for (const [raw, value] of [
      ['1', true],
      ['true', true],
      ['0', false],
      ['false', false],
    ] as const)
      expect(new VariableValues({ [name]: raw }).values.get(name)).toBe(value);
    for (const bad of ['yes', 'TRUE', 'off'])
      expect(problemsOf({ [name]: bad })).toEqual([`${name}: expected 1/0/true/false, got ${JSON.stringify(bad)}`]);
  });

  it('a URL: one, of an allowed scheme; a list where the variable takes one is refused', () => {
    const name = 'ARKVORY_ADVERTISE_URL';
    expect(new VariableValues({ [name]: 'https://10.0.0.5:8080' }).optStr(name)).toBe('https://10.0.0.5:8080');
    for (const bad of ['ftp://10.0.0.5', 'https://a, https://b'])
      expect(problemsOf({ [name]: bad })).toEqual([
        `${name}: expected a URL with scheme http:// or https://, got ${JSON.stringify(bad)}`,
      ]);
    // Text that is no URL could be a password: not shown.
    expect(problemsOf({ [name]: 'not a url' })).toEqual([
      `${name}: expected a URL with scheme http:// or https://, got "<unparseable URL>"`,
    ]);
  });

  it('a URL list: every part of an allowed scheme, read with its spaces trimmed as its consumer reads it', () => {
    const name = 'ARKVORY_REDIS_URL';
    for (const ok of ['redis://a:6379', 'redis://a:6379, rediss://b:6379', 'redis://a,\u2003redis://b'])
      expect(new VariableValues({ [name]: ok }).optStr(name)).toBe(ok);
    for (const bad of ['redis://a,http://b', 'redis://a,', 'http://a'])
      expect(problemsOf({ [name]: bad })).toEqual([
        `${name}: expected a URL with scheme redis:// or rediss://, or a comma-separated list of them, got <redacted>`,
      ]);
  });

  it('a secret set but empty is refused and marked failed, so later checks skip it', () => {
    const v = new VariableValues({ ARKVORY_METRICS_TOKEN: '', ARKVORY_PORT: 'x' });
    // In the table's order.
    expect(v.problems).toEqual([
      'ARKVORY_PORT: expected an integer from 0 to 65535, got "x"',
      'ARKVORY_METRICS_TOKEN: set but empty; give a non-empty secret, or unset the variable to leave it open on purpose',
    ]);
    expect(v.anyFailed('ARKVORY_METRICS_TOKEN')).toBe(true);
    expect(v.anyFailed('ARKVORY_PORT')).toBe(true);
    expect(v.anyFailed('ARKVORY_HOST', 'ARKVORY_ROLE')).toBe(false);
    expect(v.optStr('ARKVORY_METRICS_TOKEN')).toBeUndefined();
  });

  it("unknown ARKVORY_ names are problems; the tests' and the client commands' own are not, nor other names", () => {
    expect(problemsOf({ ARKVORY_PORTS: '1', ARKVORY_TEST_DATABASE_URL: 'x', ARKVORY_URL: 'x', PATH: '/bin' })).toEqual([
      'ARKVORY_PORTS: unknown variable (a typo?); see the README variable table',
    ]);
  });
});

describe('what a problem line shows', () => {
  it('a secret never, a URL without its user info, a long value cut at 200 characters', () => {
    expect(shown(spec('ARKVORY_METRICS_TOKEN'), 'hunter2')).toBe('<redacted>');
    expect(shown(spec('ARKVORY_ADVERTISE_URL'), 'https://user:pw@host/')).not.toContain('pw');
    expect(shown(undefined, 'x'.repeat(200))).toBe(JSON.stringify('x'.repeat(200)));
    expect(shown(undefined, 'x'.repeat(201))).toBe(JSON.stringify(`${'x'.repeat(200)}…`));
  });

  it('a URL redacted before it is cut: a secret past 200 characters is not left half shown', () => {
    const url = spec('ARKVORY_RULES_SERVICE_URL');
    expect(shown(url, `http://svc:${'p'.repeat(300)}@rules:9000/`)).toBe('"http://<redacted>@rules:9000/"');
    expect(shown(url, `http://rules:9000/${'a'.repeat(300)}?token=secret`)).toBe(
      JSON.stringify(`http://rules:9000/${'a'.repeat(182)}…`),
    );
  });

  it('a URL without its query, nor user info the parser finds without `//`; a misplaced URL too', () => {
    const url = spec('ARKVORY_RULES_SERVICE_URL');
    expect(shown(url, 'http:svc:secret@rules:9000/')).toBe('"http://<redacted>@rules:9000/"');
    expect(shown(url, 'http://svc:pa/secret@rules:9000/')).toBe('"<unparseable URL>"');
    expect(shown(undefined, 'http://store/a/?X-Amz-Signature=secret')).toBe('"http://store/a/?<redacted>"');
    expect(shown(spec('ARKVORY_HOST'), 'http:svc:secret@rules')).toBe('"http://<redacted>@rules/"');
    // Not a URL: a principal name with `@` is shown as it is; so is text whose colon does not end a
    // scheme at its start.
    expect(shown(undefined, 'ci bot@corp')).toBe('"ci bot@corp"');
    expect(shown(undefined, 'one two:three x@y')).toBe('"one two:three x@y"');
    expect(shown(undefined, '9pm:x@y')).toBe('"9pm:x@y"');
    expect(shown(undefined, '  http://u:secret@h/')).toBe('"http://<redacted>@h/"');
    // A list, entry by entry.
    expect(shown(undefined, 'redis://:p1@h1:6379,redis://h2:6379/0?password=p2')).toBe(
      '"redis://<redacted>@h1:6379,redis://h2:6379/0?<redacted>"',
    );
  });

  it('what each kind allows, in words', () => {
    expect(describeAllowed(spec('ARKVORY_PORT'))).toBe('an integer from 0 to 65535');
    expect(describeAllowed(spec('ARKVORY_ROLE'))).toBe('one of api|reader|worker|router|rules-service');
    expect(describeAllowed(spec('ARKVORY_HOST'))).toBe('a non-empty string');
    expect(describeAllowed(spec('ARKVORY_DATABASE_REQUIRE_LEAST_PRIVILEGE'))).toBe('1/0/true/false');
    expect(describeAllowed(spec('ARKVORY_DATABASE_URL'))).toBe('a URL with scheme postgres:// or postgresql://');
    expect(describeAllowed(spec('ARKVORY_WORKERS'))).toMatch(/^`auto` or an integer from 1 to 256$/);
  });
});
