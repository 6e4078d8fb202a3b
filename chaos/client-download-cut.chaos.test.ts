/**
 * Fault: the link between the resuming client (client/, `arkvory get`'s SDK) and the gateway is cut by the real
 * toxiproxy: first every connection is closed after 1 MiB (`limit_data`), then the proxy is disabled mid-download
 * (connections dropped, new ones refused) and enabled again a second later.
 * Expected: no error surfaces; the client resumes with Range + If-Range from the bytes it holds each time.
 * Recovery: the file is complete and byte-exact, and the gateway answered the resumptions with 206.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { download } from '../client/index.ts';
import { contentDigest, randomContent, request, sha256 } from '../test/support/content.ts';
import { startGateway, type GatewayProcess } from '../test/support/gateway.ts';
import { setEnabled } from './support/shared-cluster.ts';
import { addToxic, type ProxiedUpstream } from './support/toxiproxy.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';

const MiB = 1024 * 1024;
const file = randomContent(6 * MiB + 99);
const contentPath = '/api/v1/repositories/chaos/artifacts/cut.bin/content';

const chaos = useToxiproxyAndDatabase();
let gw: GatewayProcess;
let link: ProxiedUpstream;
let dir: string;

beforeAll(async () => {
  // 3 MiB/s per principal: the download lasts about 2 s, long enough to cut it in the middle.
  gw = await startGateway({
    env: { ARKVORY_DATABASE_URL: chaos.db.url, ARKVORY_DOWNLOAD_BYTES_PER_SECOND_PER_PRINCIPAL: String(3 * MiB) },
    timeoutMs: 60_000,
  });
  const put = await request(`${gw.url}${contentPath.replace(/\/content$/, '')}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${chaos.key}`, 'content-digest': contentDigest(file) },
    body: file,
  });
  expect(put.status).toBe(201);
  link = await chaos.toxiproxy.proxyTo(`127.0.0.1:${gw.port}`);
  dir = await mkdtemp(path.join(os.tmpdir(), 'arkvory-cut-'));
});

afterAll(async () => {
  await gw?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const viaProxy = () => `http://${link.host}:${link.port}${contentPath}`;
const resumedAnswers = () => gw.logLines().filter((l) => l.msg === 'request' && l.status === 206).length;

describe('the resuming client across toxiproxy cuts', () => {
  it('every connection closed after 1 MiB (limit_data): resumes until the file is whole', async () => {
    const toxic = await addToxic(link, 'limit_data', 'downstream', { bytes: MiB }, 'cut-after-1mib');
    try {
      const before = resumedAnswers();
      const output = path.join(dir, 'limit.bin');
      const result = await download({ url: viaProxy(), output, key: chaos.key });
      expect(result.resumes).toBeGreaterThanOrEqual(5);
      expect(sha256(await readFile(output))).toBe(sha256(file));
      expect(resumedAnswers() - before).toBeGreaterThanOrEqual(5);
    } finally {
      await toxic.remove();
    }
  });

  it('the link disabled mid-download and enabled a second later: resumes from what it held', async () => {
    const output = path.join(dir, 'disabled.bin');
    let cut: Promise<void> | undefined;
    const result = await download({
      url: viaProxy(),
      output,
      key: chaos.key,
      progressIntervalMs: 0,
      onProgress: (p) => {
        if (cut || p.bytes < MiB) return;
        cut = (async () => {
          await setEnabled(link, false);
          await sleep(1000);
          await setEnabled(link, true);
        })();
      },
    });
    await cut;
    expect(cut, 'the link was cut during the download').toBeDefined();
    expect(result.resumes).toBeGreaterThanOrEqual(1);
    expect(result.attempts).toBeGreaterThanOrEqual(2);
    expect(sha256(await readFile(output))).toBe(sha256(file));
  });
});
