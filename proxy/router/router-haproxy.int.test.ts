/**
 * The shipped deploy/haproxy/haproxy.cfg in front of a real writer and reader (shared profile): real
 * HAProxy (Debian package haproxy) with only the addresses and the port replaced. Checks write
 * routing, read spreading over both, and that its log of each request holds no credential. Needs
 * `haproxy` on PATH (or /usr/sbin/haproxy).
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { makeTempDir, ROOT, type GatewayProcess } from '../../test/support/gateway.ts';
import { startWriterAndReader, type WriterAndReader } from '../../test/support/writer-and-reader.ts';
import { freeLoopbackPort, startProcess, type ManagedProcess, waitUntil } from '../../test/harness/index.ts';

const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((p) => existsSync(p));
const CONTENT_ROUTE = '/api/v1/repositories/:repo/artifacts/:id/content';

let gateways: WriterAndReader | undefined;
let writer: GatewayProcess;
let reader: GatewayProcess;
let haproxy: ManagedProcess | undefined;
let haproxyUrl: string;
let key: string;
let writeKey: string;

const requestLines = (gw: GatewayProcess, keep: (line: Record<string, unknown>) => boolean) =>
  gw.logLines().filter((l) => l.msg === 'request' && keep(l));

/** The shipped example with the example addresses and the bound port replaced; nothing else changes. */
async function haproxyConfigFor(writerAddress: string, readerAddress: string, port: number): Promise<string> {
  const example = await readFile(path.join(ROOT, 'deploy/haproxy/haproxy.cfg'), 'utf8');
  return example
    .replaceAll('10.0.0.10:8080', writerAddress)
    .replace('10.0.0.11:8080', readerAddress)
    .replace(/\n\s*server reader2 [^\n]*/, '')
    .replace('bind :80', `bind 127.0.0.1:${port}`);
}

beforeAll(async () => {
  if (!HAPROXY) throw new Error('haproxy is not installed; on Debian: apt-get install -y haproxy');
  gateways = await startWriterAndReader();
  ({ writer, reader, key, writeKey } = gateways);

  const dir = await makeTempDir('arkvory-haproxy-');
  const port = await freeLoopbackPort();
  haproxyUrl = `http://127.0.0.1:${port}`;
  const config = path.join(dir, 'haproxy.cfg');
  await writeFile(config, await haproxyConfigFor(`127.0.0.1:${writer.port}`, `127.0.0.1:${reader.port}`, port));
  // -db: in the foreground, its log (`log stdout`) on this process's pipe.
  haproxy = startProcess(HAPROXY, ['-db', '-f', config], { name: 'haproxy' });
  // Both servers of the readers' backend up: a read then reaches either.
  await waitUntil(
    async () => {
      for (let i = 0; i < 4; i++) if ((await request(`${haproxyUrl}/health/live`)).status !== 200) return false;
      return true;
    },
    { what: 'haproxy to serve', timeoutMs: 20_000, retryOnError: true, process: haproxy },
  );
}, 300_000);

afterAll(async () => {
  await haproxy?.stop('SIGTERM');
  await gateways?.stop();
});

describe('deploy/haproxy/haproxy.cfg with real HAProxy', () => {
  it('sends writes to the writer only and spreads content reads over both, byte-exact', async () => {
    const file = randomContent(300_000);
    const put = await request(`${haproxyUrl}/api/v1/repositories/shared/artifacts/h.bin`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: file,
    });
    expect(put.status).toBe(201);
    const writes = (gw: GatewayProcess) => requestLines(gw, (l) => l.method === 'PUT').length;
    await waitUntil(async () => writes(writer) === 1, { what: 'the writer to log the PUT', timeoutMs: 5000 });
    expect(writes(reader)).toBe(0);

    const reads = (gw: GatewayProcess) =>
      requestLines(gw, (l) => l.route === CONTENT_ROUTE && l.method === 'GET').length;
    // Health checks may have taken a server out for a moment (fall 1): reads until both served some.
    await waitUntil(
      async () => {
        const res = await request(`${haproxyUrl}/api/v1/repositories/shared/artifacts/h.bin/content`, {
          headers: bearer(key),
        });
        expect(res.status).toBe(200);
        expect(sha256(res.body)).toBe(sha256(file));
        return reads(writer) > 0 && reads(reader) > 0;
      },
      { what: 'reads on the writer and on the reader', timeoutMs: 20_000 },
    );
  });

  it('logs each request with no credential: not the query of a pre-signed link', async () => {
    const { content, link, signature } = await gateways!.linkThrough(haproxyUrl);
    expect((await request(`${haproxyUrl}${link}`)).status).toBe(200);
    // HAProxy logs a request when it ends.
    await waitUntil(async () => haproxy!.stdout().includes(content), {
      what: 'haproxy to log the link',
      timeoutMs: 5000,
    });
    expect(haproxy!.logs()).not.toContain(signature);
  });

  it('says the client used http whatever X-Forwarded-Proto the client sent, and no path prefix: its pre-signed link is http:// on the root', async () => {
    const artifact = '/api/v1/repositories/shared/artifacts/scheme.bin';
    const put = await request(`${haproxyUrl}${artifact}`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: Buffer.from('scheme'),
    });
    expect(put.status).toBe(201);
    // The gateways trust this HAProxy's word on the scheme; the client's own header is not its word.
    const made = await request(`${haproxyUrl}${artifact}/presign`, {
      method: 'POST',
      headers: {
        ...bearer(key),
        'content-type': 'application/json',
        'x-forwarded-proto': 'https',
        'x-forwarded-prefix': '/elsewhere',
      },
      body: Buffer.from('{}'),
    });
    expect(made.status).toBe(201);
    expect((JSON.parse(made.body.toString()) as { url: string }).url).toMatch(
      new RegExp(`^${haproxyUrl.replace(/^https?/, 'http')}${artifact}/content\\?`),
    );
  });
});
