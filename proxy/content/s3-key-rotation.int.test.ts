/**
 * S3 key rotation without a restart, on real S3 servers (SeaweedFS, MinIO) and a real gateway: the
 * key id, secret (and MinIO's session token) files rewritten and SIGHUP sent while downloads keep
 * coming. A key the server refuses is kept out; a new key is taken and signs every request after it:
 * the new key may only read, so reads go on and an upload is refused by the server, which shows the
 * gateway signs with it. No download fails on the way.
 */
import { randomBytes } from 'node:crypto';
import { chmod, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { minioTemporaryKey, readOnlyKey, type S3Key } from '../../test/support/s3-keys.ts';
import type { S3Server } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { S3_STORE_KINDS } from '../../test/support/store-kinds.ts';

/** Private secret files in one directory, replaced by renaming new files over them. */
async function secretDir() {
  const dir = await makeTempDir('arkvory-s3-keys-');
  const file = (name: string) => path.join(dir, name);
  return {
    file,
    async write(name: string, content: string) {
      const tmp = `${file(name)}.${randomBytes(4).toString('hex')}`;
      await writeFile(tmp, `${content}\n`, { mode: 0o600 });
      await chmod(tmp, 0o400);
      await rename(tmp, file(name));
    },
  };
}

async function metric(gw: GatewayProcess, name: string, secret: string): Promise<number> {
  const text = (await request(`${gw.url}/metrics`)).body.toString();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{secret="${secret}"} `));
  if (line === undefined) throw new Error(`no ${name}{secret="${secret}"} in /metrics`);
  return Number(line.split(' ')[1]);
}

const logged = (gw: GatewayProcess, pattern: RegExp) => gw.logLines().filter((l) => pattern.test(String(l.msg)));

describe.each(S3_STORE_KINDS)('S3 key rotation (%s)', (kind) => {
  const db = useTestDatabase();
  let server: S3Server;
  let key: string;

  beforeAll(async () => {
    server = await sharedS3Bucket(kind);
    await createRepository(db.pool, 'keys');
    ({ key } = await createServiceAccount(db.pool, { grants: { keys: 'write' } }));
  }, 120_000);
  afterAll(async () => {
    await server?.destroy();
  });

  it('a new key signs the requests after SIGHUP, a refused one is kept out, no download fails', async () => {
    // MinIO's keys are temporary ones (a session token too), so the first is one as well.
    const first: S3Key =
      kind === 'minio'
        ? await minioTemporaryKey(server, server.bucket, 'full')
        : { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey };
    const second = await readOnlyKey(server, server.bucket);
    const secrets = await secretDir();
    const writeKey = async (k: S3Key) => {
      await secrets.write('key-id', k.accessKeyId);
      await secrets.write('secret', k.secretAccessKey);
      if (k.sessionToken) await secrets.write('session-token', k.sessionToken);
    };
    await writeKey(first);
    const { AWS_ACCESS_KEY_ID: _id, AWS_SECRET_ACCESS_KEY: _secret, ...storage } = server.env('rotation/');
    const gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ...storage,
        ARKVORY_S3_ACCESS_KEY_ID_FILE: secrets.file('key-id'),
        ARKVORY_S3_SECRET_ACCESS_KEY_FILE: secrets.file('secret'),
        ...(first.sessionToken ? { ARKVORY_S3_SESSION_TOKEN_FILE: secrets.file('session-token') } : {}),
        // Every download reaches the store (no blob in memory), so every one is signed.
        ARKVORY_BLOB_CACHE_BYTES: '0',
      },
      timeoutMs: 60_000,
    });
    const data = randomContent(256 * 1024);
    const url = `${gw.url}/api/v1/repositories/keys/artifacts/a.bin`;
    const put = await request(url, { method: 'PUT', headers: bearer(key), body: data });
    expect(put.status, put.body.toString()).toBe(201);

    let running = true;
    let downloads = 0;
    const failures: string[] = [];
    const loop = (async () => {
      while (running) {
        const got = await request(`${url}/content`, { headers: { ...bearer(key), range: 'bytes=1000-70999' } });
        if (got.status !== 206 || sha256(got.body) !== sha256(data.subarray(1000, 71_000)))
          failures.push(`${got.status} ${got.body.subarray(0, 200).toString()}`);
        downloads++;
      }
    })();
    try {
      await vi.waitFor(() => expect(downloads).toBeGreaterThan(3), { timeout: 20_000, interval: 20 });

      // A secret the server does not know: refused, the old key stays.
      await secrets.write('secret', 'not-the-secret-key');
      gw.signal('SIGHUP');
      await vi.waitFor(() => expect(logged(gw, /AWS_SECRET_ACCESS_KEY not rotated/)).toHaveLength(1), {
        timeout: 20_000,
        interval: 50,
      });
      expect(String(logged(gw, /AWS_SECRET_ACCESS_KEY not rotated/)[0]!.msg)).toMatch(
        /the S3 server refused the new value: The S3 server refused our credentials/,
      );
      expect(await metric(gw, 'arkvory_secret_rotation_failures_total', 'AWS_SECRET_ACCESS_KEY')).toBe(1);
      const beforeRotation = downloads;
      await vi.waitFor(() => expect(downloads).toBeGreaterThan(beforeRotation + 3), { timeout: 20_000 });

      // The new key: taken on SIGHUP (the files were written within the change event's debounce).
      await writeKey(second);
      gw.signal('SIGHUP');
      await vi.waitFor(() => expect(logged(gw, /AWS_SECRET_ACCESS_KEY rotated/)).toHaveLength(1), {
        timeout: 20_000,
        interval: 50,
      });
      expect(logged(gw, /AWS_ACCESS_KEY_ID rotated/)).toHaveLength(1);
      expect(await metric(gw, 'arkvory_secret_rotations_total', 'AWS_SECRET_ACCESS_KEY')).toBe(1);
      const afterRotation = downloads;
      await vi.waitFor(() => expect(downloads).toBeGreaterThan(afterRotation + 5), { timeout: 20_000 });
    } finally {
      running = false;
      await loop;
    }
    expect(failures).toEqual([]);
    // The gateway signs with the new key now: it may read (above) but not write.
    const refused = await request(`${gw.url}/api/v1/repositories/keys/artifacts/b.bin`, {
      method: 'PUT',
      headers: bearer(key),
      body: randomContent(1000),
    });
    expect(refused.status).toBe(502);
    expect(JSON.parse(refused.body.toString()).code).toBe('upstream_unreachable');
    for (const k of [first, second])
      for (const value of [k.secretAccessKey, k.sessionToken ?? k.secretAccessKey])
        expect(gw.logs()).not.toContain(value);
    expect(gw.logs()).not.toContain('not-the-secret-key');
  }, 120_000);
});
