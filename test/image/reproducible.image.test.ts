/**
 * Two builds of the same inputs give the same image: a second, cold build (its own empty cache,
 * so no build is reused) has the digest and the archive bytes of the cached one. The cold build's
 * cache starts with the Debian packages the main cache already holds, linked: each is the archive's
 * one file of its pinned version (its name says which), so fetching it again proves nothing about
 * the build and took most of a minute. The two builds run one after the other, not at once: in
 * step, a date the build failed to pin could come out the same in both. Its time is the cold build
 * time the closing note of the image issue reports.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { copyFile, link, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildImage } from './container.ts';

let work: string | undefined;

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** The main cache's downloaded Debian packages (build.sh's debs/), linked into a fresh cache. */
async function seedDebs(cache: string): Promise<void> {
  const main = path.join(
    process.env.ARKVORY_IMAGE_CACHE_DIR ??
      path.join(process.env.ARKVORY_TOOLS_DIR ?? '/root/.cache/arkvory-tools', 'image'),
    'debs',
  );
  const debs = (await readdir(main).catch(() => [])).filter((f) => f.endsWith('.deb'));
  await mkdir(path.join(cache, 'debs'), { recursive: true });
  for (const deb of debs) {
    const [from, to] = [path.join(main, deb), path.join(cache, 'debs', deb)];
    await link(from, to).catch(() => copyFile(from, to));
  }
}

async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

describe('a reproducible image', () => {
  it('a cold build in an empty cache gives the digest and the archive bytes of the cached build', async () => {
    if (process.getuid?.() !== 0)
      throw new Error('the image build needs root; run it as root, e.g. `sudo npx vitest run --project image`');
    work = await mkdtemp(path.join(os.tmpdir(), 'arkvory-image-repro-'));
    const cached = await buildImage(path.join(work, 'first'));
    // After the first build: it downloaded whatever the main cache lacked.
    const cache = path.join(work, 'cache');
    await seedDebs(cache);
    const cold = await buildImage(path.join(work, 'second'), { ...process.env, ARKVORY_IMAGE_CACHE_DIR: cache });
    expect(cold.output).not.toContain('cached');
    expect(cold.info.digest).toBe(cached.info.digest);
    expect(await fileSha256(cold.archive)).toBe(await fileSha256(cached.archive));
    expect(cold.info.uncompressedBytes).toBe(cached.info.uncompressedBytes);
    expect(cold.info.sbomPackages).toBe(cached.info.sbomPackages);
    process.stderr.write(`[image] reproducible: ${cold.info.digest}, cold build ${cold.info.buildSeconds} s\n`);
  }, 1_800_000);
});
