/** A Python source distribution pip accepts with no network: for tests that run pip against a gateway. */
import { execFile } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * Writes `<name>-1.0.tar.gz` into `dir` and returns its bytes: an sdist whose in-tree PEP 517 backend
 * needs nothing installed, so `pip download` prepares its metadata offline.
 */
export async function offlineSdist(dir: string, name: string): Promise<Buffer> {
  const base = `${name}-1.0`;
  const src = path.join(dir, base);
  await mkdir(src, { recursive: true });
  await writeFile(
    path.join(src, 'pyproject.toml'),
    '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
  );
  await writeFile(
    path.join(src, 'backend.py'),
    [
      'import os',
      'def get_requires_for_build_wheel(config_settings=None):',
      '    return []',
      'def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):',
      `    d = os.path.join(metadata_directory, "${base}.dist-info")`,
      '    os.makedirs(d)',
      `    open(os.path.join(d, "METADATA"), "w").write("Metadata-Version: 2.1\\nName: ${name}\\nVersion: 1.0\\n")`,
      `    return "${base}.dist-info"`,
      '',
    ].join('\n'),
  );
  await writeFile(path.join(src, 'PKG-INFO'), `Metadata-Version: 2.1\nName: ${name}\nVersion: 1.0\n`);
  const tarball = path.join(dir, `${base}.tar.gz`);
  await promisify(execFile)('tar', ['czf', tarball, '-C', dir, base]);
  return readFile(tarball);
}
