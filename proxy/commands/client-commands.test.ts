import { describe, expect, it } from 'vitest';
import { oneLine, outputNameOf } from './client-commands.ts';

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

  it.each([
    `${base}/a%00b.bin/content`,
    `${base}/%1B%5B2J%1B%5D0%3Bowned%07.bin/content`,
    `${base}/two%0Alines.bin/content`,
    `${base}/c1%C2%9B31m.bin/content`,
    `${base}/${'a'.repeat(256)}/content`,
    `${base}/${'%C3%A9'.repeat(128)}/content`,
  ])('%s: a control character or more than 255 bytes is a usage error, not a file name', (url) =>
    expect(() => outputNameOf(url)).toThrow(/control character or is longer than 255 bytes; give -o FILE/),
  );

  it('takes a name of exactly 255 bytes', () =>
    expect(outputNameOf(`${base}/${'%C3%A9'.repeat(127)}a/content`)).toBe(`${'é'.repeat(127)}a`));
});

describe('oneLine: the link `arkvory get --link-file` reads', () => {
  it.each([
    ['https://gw/x?s=1\n', 'https://gw/x?s=1'],
    ['  https://gw/x?s=1 \r\n\n', 'https://gw/x?s=1'],
    ['libs/app.tar.gz', 'libs/app.tar.gz'],
  ])('%j → %s', (held, line) => expect(oneLine(held, 'standard input')).toBe(line));

  it('refuses an empty file and one of two lines, naming where it read', () => {
    expect(() => oneLine(' \n', '--link-file l.txt')).toThrow('--link-file l.txt is empty');
    expect(() => oneLine('a\r\nb\n', 'standard input')).toThrow('standard input holds 2 lines');
  });
});
