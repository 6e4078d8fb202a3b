import { describe, expect, it } from 'vitest';
import { keyFromBasic } from './basic-credentials.ts';
import { generateKey, parseAuthorization } from './key-format.ts';

const basic = (userPass: string) => `Basic ${Buffer.from(userPass, 'utf8').toString('base64')}`;

describe('Basic credentials', () => {
  it('takes the key from the password whatever the user name is', () => {
    const k = generateKey();
    for (const user of ['', 'ci', 'anything at all', 'ünïcode', 'a:b']) {
      const header = basic(`${user.replace(':', '')}:${k.key}`);
      expect(keyFromBasic(header)).toBe(k.key);
      expect(parseAuthorization(header)).toEqual({ keyId: k.keyId, secret: k.secret });
    }
    expect(parseAuthorization(`basic   ${Buffer.from(`u:${k.key}`).toString('base64')}`)).toEqual({
      keyId: k.keyId,
      secret: k.secret,
    });
  });

  it('takes a key sent as the user name with an empty password (token-as-user URLs)', () => {
    const k = generateKey();
    expect(parseAuthorization(basic(`${k.key}:`))).toEqual({ keyId: k.keyId, secret: k.secret });
  });

  it('refuses malformed Basic headers and keys', () => {
    const k = generateKey();
    for (const bad of [
      'Basic',
      'Basic ',
      `Basic ${k.key}`,
      basic(k.key),
      basic(`u:${k.key}x`),
      basic(`u:${k.key.slice(0, -1)}`),
      basic('u:'),
      `Basic ${Buffer.from(`u:${k.key}`).toString('base64')} extra`,
      `Basic !!${Buffer.from(`u:${k.key}`).toString('base64')}`,
      basic(`u:${'a'.repeat(400)}`),
      `x${basic(`u:${k.key}`)}`,
      `Bearer ${basic(`u:${k.key}`)}`,
    ]) {
      expect(parseAuthorization(bad), bad).toBeUndefined();
    }
  });
});
