import { describe, expect, it } from 'vitest';
import { isPlaceholderSecret } from './placeholder-secrets.ts';

describe('isPlaceholderSecret', () => {
  it("an example's placeholder, whatever its case, separator or suffix", () => {
    for (const value of [
      'change-me',
      'change-me-metrics-token',
      'Change_Me',
      'CHANGEME',
      'changeme123',
      'change me',
      'replace-with-the-secret-key',
      'replace_with_a_token',
      'replace-me',
      '<token>',
      '<your metrics token>',
      '  change-me\n',
    ])
      expect(isPlaceholderSecret(value), value).toBe(true);
  });

  it('a real secret, even one that merely contains or starts like those words', () => {
    for (const value of [
      '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08',
      'changement-de-jeton-7f3a',
      'replacement-2b9c',
      'exchange-me-not-4d2e',
      'my-change-me',
      'token',
      '<token',
      'a<b>',
    ])
      expect(isPlaceholderSecret(value), value).toBe(false);
  });
});
