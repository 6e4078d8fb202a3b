/**
 * The shipped deploy/nginx/arkvory.conf in front of a real writer and reader (shared profile):
 * real nginx (Debian package nginx-light or nginx) with only the addresses and the port replaced.
 * Checks write routing, read spreading and Range. Needs `nginx` on PATH (or /usr/sbin/nginx).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer } from '../../test/support/auth.ts';
import { parseMultipart, randomContent, request, sha256 } from '../../test/support/content.ts';
import { makeTempDir, ROOT, type GatewayProcess } from '../../test/support/gateway.ts';
import { startWriterAndReader, type WriterAndReader } from '../../test/support/writer-and-reader.ts';
import { APT_TEMPLATE } from '../content/paths.ts';
import { freeLoopbackPort, nginxMainConfig } from '../../test/harness/index.ts';
import { waitUntil } from '../../test/harness/index.ts';

const MiB = 1024 * 1024;
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const CONTENT_ROUTE = '/api/v1/repositories/:repo/artifacts/:id/content';

let gateways: WriterAndReader | undefined;
let writer: GatewayProcess;
let reader: GatewayProcess;
let nginx: ChildProcess | undefined;
let nginxUrl: string;
let accessLog: string;
let key: string;
let writeKey: string;
const file = randomContent(2 * MiB + 99);
const filePath = '/api/v1/repositories/shared/artifacts/n.bin/content';

function contentReads(gw: GatewayProcess): number {
  return gw.logLines().filter((l) => l.msg === 'request' && l.route === CONTENT_ROUTE && l.method === 'GET').length;
}

/** The shipped example with the example addresses, listen port and log file replaced; nothing else changes. */
async function nginxConfigFor(
  writerAddress: string,
  readerAddresses: string[],
  port: number,
  accessLog: string,
): Promise<string> {
  const example = await readFile(path.join(ROOT, 'deploy/nginx/arkvory.conf'), 'utf8');
  const readers = ['10.0.0.11:8080', '10.0.0.12:8080'];
  let text = example
    .replaceAll('10.0.0.10:8080', writerAddress)
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
    .replace('/var/log/nginx/arkvory-access.log', accessLog);
  readers.forEach((example, i) => {
    const address = readerAddresses[i];
    text = address
      ? text.replace(example, address)
      : text.replace(new RegExp(`\\n\\s*server ${example.replace(/\./g, '\\.')}[^\\n]*`), '');
  });
  return text;
}

beforeAll(async () => {
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  gateways = await startWriterAndReader();
  ({ writer, reader, key, writeKey } = gateways);

  const dir = await makeTempDir('arkvory-nginx-');
  await mkdir(path.join(dir, 'tmp'), { recursive: true });
  await chmod(path.join(dir, 'tmp'), 0o777);
  const port = await freeLoopbackPort();
  nginxUrl = `http://127.0.0.1:${port}`;
  const site = path.join(dir, 'arkvory.conf');
  accessLog = path.join(dir, 'access.log');
  await writeFile(
    site,
    await nginxConfigFor(`127.0.0.1:${writer.port}`, [`127.0.0.1:${reader.port}`], port, accessLog),
  );
  await writeFile(
    path.join(dir, 'nginx.conf'),
    nginxMainConfig({
      prefix: dir,
      tempDir: path.join(dir, 'tmp'),
      workerProcesses: 1,
      workerConnections: 256,
      errorLogLevel: 'warn',
      // What an operator's nginx.conf has: nginx's default `combined` log, which the site's replaces.
      http: `access_log ${accessLog};\ninclude ${site};`,
    }),
  );
  nginx = spawn(NGINX, ['-p', dir, '-c', path.join(dir, 'nginx.conf')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  nginx.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  await waitUntil(
    async () => {
      if (nginx!.exitCode !== null) throw new Error(`nginx exited: ${output}`);
      try {
        await request(`${nginxUrl}/health/live`);
        return true;
      } catch {
        return false;
      }
    },
    { what: 'nginx to start', timeoutMs: 10_000 },
  ).catch((err: Error) => {
    throw new Error(`${err.message}: ${output}`);
  });
}, 300_000);

afterAll(async () => {
  if (nginx && nginx.exitCode === null) {
    const exited = new Promise((r) => nginx!.once('exit', r));
    nginx.kill('SIGQUIT');
    await exited;
  }
  await gateways?.stop();
});

describe('deploy/nginx/arkvory.conf with real nginx', () => {
  it('sends uploads and other writes to the writer only', async () => {
    const put = await request(`${nginxUrl}/api/v1/repositories/shared/artifacts/n.bin`, {
      method: 'PUT',
      headers: { ...bearer(writeKey), 'content-type': 'application/octet-stream' },
      body: file,
    });
    expect(put.status).toBe(201);
    const put2 = await request(`${nginxUrl}/api/v1/repositories/shared/artifacts/gone.bin`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: Buffer.from('x'),
    });
    expect(put2.status).toBe(201);
    const del = await request(`${nginxUrl}/api/v1/repositories/shared/artifacts/gone.bin`, {
      method: 'DELETE',
      headers: bearer(writeKey),
    });
    expect(del.status).toBeLessThan(300);
    const writes = () =>
      writer
        .logLines()
        .filter((l) => l.msg === 'request' && (l.method === 'PUT' || l.method === 'DELETE'))
        .map((l) => l.status);
    // A gateway logs a request when it has ended; the last line may trail the response.
    for (let i = 0; i < 100 && writes().length < 3; i++) await new Promise((r) => setTimeout(r, 25));
    expect(writes()).toEqual([201, 201, del.status]);
    expect(reader.logLines().filter((l) => l.msg === 'request' && l.method !== 'GET' && l.method !== 'HEAD')).toEqual(
      [],
    );
  });

  it('spreads content reads over the writer and the reader, byte-exact with Range', async () => {
    const before = [writer, reader].map(contentReads);
    for (let i = 0; i < 6; i++) {
      const start = i * 1000;
      const res = await request(`${nginxUrl}${filePath}`, {
        headers: { ...bearer(key), range: `bytes=${start}-${start + 999}` },
      });
      expect(res.status).toBe(206);
      expect(res.headers['content-range']).toBe(`bytes ${start}-${start + 999}/${file.length}`);
      expect(res.body.equals(file.subarray(start, start + 1000))).toBe(true);
    }
    const deadline = Date.now() + 5000;
    let counts = [0, 0];
    while (Date.now() < deadline) {
      counts = [writer, reader].map((g, i) => contentReads(g) - before[i]!);
      if (counts[0]! + counts[1]! === 6) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(counts[0]! + counts[1]!).toBe(6);
    expect(counts[0]).toBeGreaterThan(0);
    expect(counts[1]).toBeGreaterThan(0);
    const full = await request(`${nginxUrl}${filePath}`, { headers: bearer(key) });
    expect(full.status).toBe(200);
    expect(sha256(full.body)).toBe(sha256(file));
    const suffix = await request(`${nginxUrl}${filePath}`, { headers: { ...bearer(key), range: 'bytes=-100' } });
    expect(suffix.body.equals(file.subarray(file.length - 100))).toBe(true);
    const multi = await request(`${nginxUrl}${filePath}`, {
      headers: { ...bearer(key), range: 'bytes=0-9,500000-500009' },
    });
    expect(multi.status).toBe(206);
    expect(parseMultipart(multi.body, multi.headers['content-type']!).map((p) => p.data)).toEqual([
      file.subarray(0, 10),
      file.subarray(500000, 500010),
    ]);
    const ifRange = await request(`${nginxUrl}${filePath}`, {
      headers: { ...bearer(key), range: 'bytes=0-9', 'if-range': full.headers.etag! },
    });
    expect(ifRange.status).toBe(206);
  });

  it("spreads a package version's flat apt paths (…/apt/./Packages as apt asks) over both", async () => {
    const index = randomContent(5000);
    const put = await request(`${nginxUrl}/api/v1/repositories/shared/packages/apt/stable/assets/Packages`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: index,
    });
    expect(put.status).toBe(201);
    const aptReads = (gw: GatewayProcess) =>
      gw.logLines().filter((l) => l.msg === 'request' && l.route === APT_TEMPLATE && l.method === 'GET').length;
    for (let i = 0; i < 6; i++) {
      const dot = i % 2 === 0 ? './' : '';
      const res = await request(`${nginxUrl}/api/v1/repositories/shared/packages/apt/stable/apt/${dot}Packages`, {
        headers: bearer(key),
      });
      expect(res.status).toBe(200);
      expect(res.body.equals(index)).toBe(true);
    }
    let counts = [0, 0];
    for (let i = 0; i < 200 && counts[0]! + counts[1]! < 6; i++) {
      counts = [writer, reader].map(aptReads);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(counts[0]! + counts[1]!).toBe(6);
    expect(counts[0]).toBeGreaterThan(0);
    expect(counts[1]).toBeGreaterThan(0);
  });

  it('keeps metadata and listing requests on the writer', async () => {
    const metadataReads = (gw: GatewayProcess) =>
      gw
        .logLines()
        .filter(
          (l) => l.msg === 'request' && l.method === 'GET' && l.route === '/api/v1/repositories/:repo/artifacts/:id',
        ).length;
    for (let i = 0; i < 3; i++)
      expect(
        (await request(`${nginxUrl}/api/v1/repositories/shared/artifacts/n.bin`, { headers: bearer(key) })).status,
      ).toBe(200);
    for (let i = 0; i < 100 && metadataReads(writer) < 3; i++) await new Promise((r) => setTimeout(r, 25));
    expect(metadataReads(writer)).toBe(3);
    expect(metadataReads(reader)).toBe(0);
  });

  it('logs each request with no credential: not the query of a pre-signed link, not a key sent as the Basic user', async () => {
    const { content, link, signature } = await gateways!.linkThrough(nginxUrl);
    const query = link.slice(link.indexOf('?') + 1);
    expect((await request(`${nginxUrl}${link}`)).status).toBe(200);
    // Token-as-user tools (`https://<key>@host/…`) send the key as the Basic user name.
    const basicUser = { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` };
    expect((await request(`${nginxUrl}${content}`, { headers: basicUser })).status).toBe(200);
    // nginx writes a request's line once it has sent the answer: the client may have read it first.
    let logged = '';
    await waitUntil(
      async () => {
        logged = await readFile(accessLog, 'utf8');
        return logged.split('\n').filter((l) => l.includes(content)).length >= 2;
      },
      { what: 'nginx to log both reads', timeoutMs: 5000 },
    );
    expect(logged).not.toContain(signature);
    expect(logged).not.toContain(query);
    expect(logged).not.toContain(key.slice(`ark_`.length + 17));
  });

  it("passes no X-Forwarded-Prefix of a client's on: the gateways, trusting nginx, make links on the root", async () => {
    const artifact = '/api/v1/repositories/shared/artifacts/prefix.bin';
    const put = await request(`${nginxUrl}${artifact}`, {
      method: 'PUT',
      headers: bearer(writeKey),
      body: Buffer.from('prefix'),
    });
    expect(put.status).toBe(201);
    const made = await request(`${nginxUrl}${artifact}/presign`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json', 'x-forwarded-prefix': '/elsewhere' },
      body: Buffer.from('{}'),
    });
    expect(made.status).toBe(201);
    const { url } = JSON.parse(made.body.toString()) as { url: string };
    expect(url.startsWith(`${nginxUrl}${artifact}/content?`), url).toBe(true);
    expect((await request(url)).status).toBe(200);
  });
});
