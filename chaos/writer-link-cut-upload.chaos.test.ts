/**
 * Fault: the writer's whole PostgreSQL link (pool, auth listener and lease connection) is cut (proxy disabled) while an upload streams in.
 * Expected: the upload fails with a clear 503, leaves no catalog row, no blob and no temp file; losing the lease connection
 * (its barriers) fences the writer for good (503 lease_lost, /health/status 503). Recovery: link back, writer restarted, the same upload succeeds.
 */
import { readdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { randomContent, sha256 } from '../test/support/content.ts';
import { makeTempDir, startGateway } from '../test/support/gateway.ts';
import { awaitLogLine, call } from './support/gateways.ts';
import { setEnabled } from './support/shared-cluster.ts';
import { waitForHealth, waitUntil } from '../test/harness/index.ts';
import { useToxiproxyAndDatabase } from './support/chaos-database.ts';

const KiB = 1024;
const file = randomContent(512 * KiB);
const uploadPath = '/api/v1/repositories/chaos/artifacts/cut.bin';

const chaos = useToxiproxyAndDatabase();

/**
 * A PUT whose body the test feeds by hand: `send` writes a chunk; the promise settles with the
 * response (which may come before the body is complete) or with the socket error.
 */
function startUpload(
  url: string,
  size: number,
): { send(chunk: Buffer): Promise<void>; result: Promise<{ status: number; body: string } | { error: string }> } {
  const req = http.request(url, {
    method: 'PUT',
    agent: false,
    headers: {
      authorization: `Bearer ${chaos.key}`,
      'content-type': 'application/octet-stream',
      'content-length': String(size),
    },
  });
  const result = new Promise<{ status: number; body: string } | { error: string }>((resolve) => {
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
  });
  return {
    result,
    send: (chunk) => new Promise((resolve) => (req.write(chunk) ? resolve() : req.once('drain', resolve))),
  };
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

describe('the writer↔PostgreSQL link cut during an upload', () => {
  it('fails the upload with a clear error and leaves nothing; after the link returns and a restart, the same upload succeeds', async () => {
    const link = await chaos.toxiproxy.proxyToUrl(inject('adminDatabaseUrl'));
    const dataDir = await makeTempDir();
    const env = { ARKVORY_DATABASE_URL: link.through(chaos.db.url) };
    try {
      const writer = await startGateway({ env, dataDir, timeoutMs: 60_000 });
      const upload = startUpload(`${writer.url}${uploadPath}`, file.length);
      await upload.send(file.subarray(0, 128 * KiB));
      await waitUntil(async () => (await filesUnder(path.join(dataDir, 'tmp'))).length === 1, {
        timeoutMs: 10_000,
        intervalMs: 20,
        what: 'the upload to reach tmp/',
      });

      await setEnabled(link, false);
      await awaitLogLine(writer, 'fenced:', { timeoutMs: 5000, what: 'the writer to fence' });
      // The client goes on sending; the writer refuses the rest.
      for (let offset = 128 * KiB; offset < file.length; offset += 64 * KiB) {
        await Promise.race([upload.send(file.subarray(offset, offset + 64 * KiB)), upload.result]);
      }
      const outcome = await upload.result;
      expect(outcome).toMatchObject({ status: 503 });
      expect(JSON.parse((outcome as { body: string }).body).code).toBe('lease_lost');

      const rows = await chaos.db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE name = 'cut.bin'`);
      expect(rows.rowCount).toBe(0);
      await waitUntil(async () => (await filesUnder(path.join(dataDir, 'tmp'))).length === 0, {
        timeoutMs: 5000,
        intervalMs: 50,
        what: 'the temp file to be removed',
      });
      expect((await filesUnder(path.join(dataDir, 'blobs'))).filter((f) => f.endsWith(sha256(file)))).toEqual([]);
      expect((await call(`${writer.url}/health/status`)).status).toBe(503);

      // The link returns; the fenced writer stays fenced (its writer lock was lost with the connection).
      await setEnabled(link, true);
      const stillFenced = await call(`${writer.url}${uploadPath}`, {
        method: 'PUT',
        key: chaos.key,
        headers: { 'content-type': 'application/octet-stream' },
        body: file,
      });
      expect([stillFenced.status, stillFenced.code]).toEqual([503, 'lease_lost']);
      expect(await writer.stop('SIGTERM')).toBe(0);
      expect(writer.logs()).not.toMatch(/unhandled|uncaught/i);

      const restarted = await startGateway({ env, dataDir, timeoutMs: 60_000 });
      await waitForHealth(restarted, { timeoutMs: 60_000 });
      const put = await call(`${restarted.url}${uploadPath}`, {
        method: 'PUT',
        key: chaos.key,
        headers: { 'content-type': 'application/octet-stream' },
        body: file,
      });
      expect(put.status).toBe(201);
      const got = await call(`${restarted.url}${uploadPath}/content`, { key: chaos.key });
      expect(sha256(got.body)).toBe(sha256(file));
      expect((await chaos.db.pool.query(`SELECT 1 FROM arkvory_artifacts WHERE name = 'cut.bin'`)).rowCount).toBe(1);
    } finally {
      await link.proxy.remove();
    }
  }, 150_000);
});
