import { describe, expect, it } from 'vitest';
import { outputNameOf } from './client-commands.ts';

describe('outputNameOf: the file `arkvory get` writes without -o', () => {
  const base = 'https://gw.example/api/v1/repositories/r/artifacts';
  it.each([
    [`${base}/app.tar.gz/content`, 'app.tar.gz'],
    [`${base}/my%20file.bin/content?X-Arkvory-Key=k`, 'my file.bin'],
    // A stranger's link cannot make it leave the directory.
    [`${base}/..%2F..%2Fescaped.txt/content`, 'escaped.txt'],
    [`${base}/..%5C..%5Cwin.txt/content`, 'win.txt'],
    [`${base}/%2Fetc%2Fpasswd/content`, 'passwd'],
    // A malformed escape is taken as written.
    [`${base}/bad%E0%A4%A.bin/content`, 'bad%E0%A4%A.bin'],
  ])('%s → %s', (url, name) => expect(outputNameOf(url)).toBe(name));

  it.each([`${base}/..%2F..%2F/content`, `${base}/.%2F/content`, `${base}/a%2F..%2F..%2F/content`])(
    '%s names no file: a usage error',
    (url) => expect(() => outputNameOf(url)).toThrow(/names no file to write/),
  );
});
