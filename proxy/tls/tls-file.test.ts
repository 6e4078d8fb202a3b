import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readTlsFile, readTlsFileSync, TLS_FILE_MAX_BYTES } from './tls-file.ts';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'arkvory-tls-file-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe.each([
  ['readTlsFile', readTlsFile],
  ['readTlsFileSync', readTlsFileSync],
] as const)('%s', (_name, read) => {
  it('reads a file of up to 1 MiB whole', async () => {
    const file = path.join(dir, 'ca.pem');
    const bytes = Buffer.alloc(TLS_FILE_MAX_BYTES, 'a');
    writeFileSync(file, bytes);
    expect(Buffer.compare((await read(file, 'V')) as Buffer, bytes)).toBe(0);
    writeFileSync(file, '');
    expect(await read(file, 'V')).toEqual(Buffer.alloc(0));
  });

  it('refuses a larger file, a device, a named pipe and a directory without reading them; names a missing one', async () => {
    const big = path.join(dir, 'big.pem');
    writeFileSync(big, Buffer.alloc(TLS_FILE_MAX_BYTES + 1));
    expect(await read(big, 'V')).toBe(
      `V ${big} is ${TLS_FILE_MAX_BYTES + 1} bytes, more than the 1 MiB (1048576 bytes) a TLS file may be`,
    );
    const zero = path.join(dir, 'zero.pem');
    symlinkSync('/dev/zero', zero);
    expect(await read(zero, 'V')).toBe(`V ${zero} is not a regular file`);
    const fifo = path.join(dir, 'fifo.pem');
    execFileSync('mkfifo', [fifo]);
    expect(await read(fifo, 'V')).toBe(`V ${fifo} is not a regular file`);
    expect(await read(dir, 'V')).toBe(`V ${dir} is not a regular file`);
    expect(await read(path.join(dir, 'gone.pem'), 'V')).toBe(`cannot read V ${path.join(dir, 'gone.pem')} (ENOENT)`);
  });
});
