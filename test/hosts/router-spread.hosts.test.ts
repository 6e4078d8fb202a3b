/**
 * Scenario 1 (issue 24): reads from the client host through the router host spread over the
 * writer, reader1 and reader2 on their own hosts; every download is byte-exact.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { curlOnClient, MiB, readDownload, routerLineFor, sha256, startDeployment, type Deployment } from './deployment.ts';

let d: Deployment;

beforeAll(async () => {
  d = await startDeployment({ policy: { slots: 4, rateBytesPerSec: 4 * 16 * MiB }, fileBytes: 2 * MiB + 4321 });
}, 150_000);

afterAll(async () => {
  await d?.stop();
});

describe('reads through the router across hosts', () => {
  it('spreads nine sequential downloads 3/3/3 over writer, reader1 and reader2, all byte-exact', async () => {
    const served = new Map<string, number>();
    for (let i = 0; i < 9; i++) {
      const out = path.join(d.downloads, `spread-${i}`);
      const id = `akh-spread-${i}`;
      const res = await curlOnClient(d, ['--fail', '-H', `X-Request-Id: ${id}`, '-o', out, `${d.routerUrl}${d.contentPath}`]);
      expect(res.code, res.stderr).toBe(0);
      expect(sha256(readDownload(d, `spread-${i}`))).toBe(sha256(d.file));
      const line = await routerLineFor(d, id);
      expect(line).toMatchObject({ status: 200, completed: true, attempts: 1 });
      served.set(String(line.backend), (served.get(String(line.backend)) ?? 0) + 1);
    }
    expect(Object.fromEntries(served)).toEqual({ [d.writer.url]: 3, [d.readers[0].url]: 3, [d.readers[1].url]: 3 });
  });

  it('serves a Range through the router byte-exact, whichever host answers', async () => {
    const from = d.file.length - 100_000;
    const out = path.join(d.downloads, 'range');
    const res = await curlOnClient(d, ['--fail', '-r', `${from}-`, '-o', out, `${d.routerUrl}${d.contentPath}`]);
    expect(res.code, res.stderr).toBe(0);
    expect(readDownload(d, 'range').equals(d.file.subarray(from))).toBe(true);
  });
});
