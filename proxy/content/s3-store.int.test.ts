/**
 * A real gateway on the S3 store, on each real S3 server: multipart sessions staged as objects under
 * uploads/ and assembled by the worker; a chunked upload (no length) as an S3 multipart upload;
 * `arkvory doctor` reading the storage-id object; the credentials never in logs, health or metrics.
 * The shared content, client and maintenance suites run over these servers too (content*.int.test.ts,
 * maintenance.int.test.ts). Each kind is the run's shared server on a fresh bucket (test/support/shared-s3.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256, type RawResponse } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { runCli, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import { listKeys, type S3Server } from '../../test/support/s3-server.ts';
import { sharedS3Bucket } from '../../test/support/shared-s3.ts';
import { S3_STORE_KINDS } from '../../test/support/store-kinds.ts';

const MiB = 1024 * 1024;
const json = (res: RawResponse) => JSON.parse(res.body.toString()) as Record<string, unknown>;

describe.each(S3_STORE_KINDS)('a gateway on the S3 store (%s)', (kind) => {
  const db = useTestDatabase();
  let server: S3Server;
  let gw: GatewayProcess;
  let key: string;
  const repo = () => `${gw.url}/api/v1/repositories/s3`;

  beforeAll(async () => {
    server = await sharedS3Bucket(kind);
    await createRepository(db.pool, 's3');
    ({ key } = await createServiceAccount(db.pool, { grants: { s3: 'write' } }));
    gw = await startGateway({
      env: { ARKVORY_DATABASE_URL: db.url, ARKVORY_LOG_LEVEL: 'debug', ...server.env('arkvory/') },
      timeoutMs: 60_000,
    });
  });
  afterAll(async () => {
    await gw?.stop();
    await server?.destroy();
  });

  it('a chunked upload of unknown length (S3 multipart upload) publishes under the prefix; nothing left in tmp/', async () => {
    const data = randomContent(19 * MiB + 5);
    async function* body() {
      for (let offset = 0; offset < data.length; offset += MiB) yield data.subarray(offset, offset + MiB);
    }
    const put = await request(`${repo()}/artifacts/chunked.bin`, {
      method: 'PUT',
      headers: { ...bearer(key), 'transfer-encoding': 'chunked', 'content-digest': contentDigest(data) },
      body: body(),
    });
    expect(put.status, put.body.toString()).toBe(201);
    const hex = sha256(data);
    expect(await listKeys(server, 'arkvory/blobs/')).toContain(
      `arkvory/blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`,
    );
    expect(await listKeys(server, 'arkvory/tmp/')).toEqual([]);
    const got = await request(`${repo()}/artifacts/chunked.bin/content`, {
      headers: { ...bearer(key), range: `bytes=${8 * MiB - 3}-${8 * MiB + 2}` },
    });
    expect(got.status).toBe(206);
    expect(got.body).toEqual(data.subarray(8 * MiB - 3, 8 * MiB + 3));
  });

  /** A multipart session of `parts` through the gateway, completed and published by the worker. */
  async function multipartSession(name: string, parts: Buffer[]): Promise<void> {
    const file = Buffer.concat(parts);
    const opened = await request(`${repo()}/artifacts/${name}/uploads`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ size: file.length, sha256: sha256(file) })),
    });
    expect(opened.status, opened.body.toString()).toBe(201);
    const upload = json(opened).upload as string;
    for (const [i, p] of parts.entries()) {
      const r = await request(`${repo()}/uploads/${upload}/parts/${i + 1}`, {
        method: 'PUT',
        headers: bearer(key),
        body: p,
      });
      expect(r.status, r.body.toString()).toBe(200);
    }
    expect(await listKeys(server, `arkvory/uploads/${upload}/`)).toHaveLength(parts.length);
    const done = await request(`${repo()}/uploads/${upload}/complete`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ parts: parts.map((p, i) => ({ partNumber: i + 1, sha256: sha256(p) })) })),
    });
    expect(done.status, done.body.toString()).toBe(202);
    await expect
      .poll(async () => json(await request(`${repo()}/uploads/${upload}`, { headers: bearer(key) })).state, {
        timeout: 60_000,
      })
      .toBe('done');
    expect(sha256((await request(`${repo()}/artifacts/${name}/content`, { headers: bearer(key) })).body)).toBe(
      sha256(file),
    );
    // The worker marks the session done, then removes its parts: wait for the removal, not just the state.
    await expect.poll(() => listKeys(server, `arkvory/uploads/${upload}/`), { timeout: 10_000 }).toEqual([]);
    expect(await listKeys(server, 'arkvory/tmp/')).toEqual([]);
    const open: string[] = [];
    for await (const u of server.client().listMultipartUploads('')) open.push(u.key);
    expect(open).toEqual([]);
  }
  const completions = (assembly: string) =>
    gw
      .logs()
      .split('\n')
      .filter((l) => l.includes('"upload.completed"') && l.includes(`"assembly":"${assembly}"`)).length;

  it.each([
    {
      title:
        'multipart session with parts below 5 MiB: parts are objects under uploads/, the worker streams them into the blob, the parts are removed',
      assembly: 'streamed',
      name: 'multi.bin',
      cuts: [4 * MiB, 8 * MiB, 9 * MiB + 3],
    },
    {
      title:
        'multipart session with parts of 5 MiB and more: the worker assembles them server-side (UploadPartCopy), reading each once to check the digests',
      assembly: 'server-copy',
      name: 'multi-copy.bin',
      cuts: [5 * MiB, 11 * MiB, 11 * MiB + 5],
    },
  ])('$title', async ({ assembly, name, cuts }) => {
    const file = randomContent(cuts.at(-1)!);
    const before = completions(assembly);
    await multipartSession(
      name,
      cuts.map((end, i) => file.subarray(i === 0 ? 0 : cuts[i - 1], end)),
    );
    expect(completions(assembly)).toBe(before + 1);
  });

  it("an empty artifact round-trips (with and without Content-Digest); an empty multipart session claiming another file's sha256 plants nothing, and that file then publishes and reads back", async () => {
    const empty = Buffer.alloc(0);
    for (const [name, digest] of [
      ['empty-digest.bin', { 'content-digest': contentDigest(empty) }],
      ['empty.bin', {}],
    ] as const) {
      const put = await request(`${repo()}/artifacts/${name}`, {
        method: 'PUT',
        headers: { ...bearer(key), ...digest },
        body: empty,
      });
      expect(put.status, put.body.toString()).toBe(201);
      const got = await request(`${repo()}/artifacts/${name}/content`, { headers: bearer(key) });
      expect(got.status).toBe(200);
      expect(got.body).toEqual(empty);
    }
    const real = randomContent(1000);
    const hex = sha256(real);
    const blobKey = `arkvory/blobs/sha256/${hex.slice(0, 2)}/${hex.slice(2, 4)}/${hex}`;
    // Several: before the fix the plant raced the body's end (one try often lost it).
    for (let i = 0; i < 5; i++) {
      const opened = await request(`${repo()}/artifacts/claim-${i}/uploads`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ size: 0, sha256: hex })),
      });
      expect(opened.status, opened.body.toString()).toBe(201);
      const upload = json(opened).upload as string;
      const part = await request(`${repo()}/uploads/${upload}/parts/1`, {
        method: 'PUT',
        headers: bearer(key),
        body: empty,
      });
      const done = await request(`${repo()}/uploads/${upload}/complete`, {
        method: 'POST',
        headers: { ...bearer(key), 'content-type': 'application/json' },
        body: Buffer.from(JSON.stringify({ parts: [{ partNumber: 1, sha256: json(part).sha256 }] })),
      });
      expect(done.status, done.body.toString()).toBe(202);
      await expect
        .poll(async () => json(await request(`${repo()}/uploads/${upload}`, { headers: bearer(key) })).state, {
          timeout: 30_000,
        })
        .not.toBe('completing');
      expect(await listKeys(server, 'arkvory/blobs/')).not.toContain(blobKey);
    }
    const put = await request(`${repo()}/artifacts/claimed.bin`, { method: 'PUT', headers: bearer(key), body: real });
    expect(put.status, put.body.toString()).toBe(201);
    const got = await request(`${repo()}/artifacts/claimed.bin/content`, { headers: bearer(key) });
    expect(got.status).toBe(200);
    expect(got.body).toEqual(real);
  });

  it('arkvory doctor reads the storage-id object; the secret key is in no log line, health answer or metric', async () => {
    const env = { ARKVORY_DATABASE_URL: db.url, ARKVORY_DATA_DIR: gw.dataDir, ...server.env('arkvory/') };
    const ok = await runCli(['doctor'], env);
    expect(ok.stdout).toMatch(
      new RegExp(`ok +storage: s3://${server.bucket}/arkvory/ and the database are both storage`),
    );
    const wrong = await runCli(['doctor'], { ...env, AWS_SECRET_ACCESS_KEY: 'not-the-secret' });
    expect(wrong.stdout).toMatch(/FAIL +storage: .*AWS_SECRET_ACCESS_KEY/);
    expect(`${ok.stdout}${ok.stderr}${wrong.stdout}${wrong.stderr}`).not.toContain(server.secretAccessKey);
    const answers = await Promise.all(
      ['/health/live', '/health/status', '/metrics'].map((p) => request(`${gw.url}${p}`)),
    );
    const ready = await request(`${gw.url}/health/ready`, { headers: bearer(key) });
    for (const res of [...answers, ready]) expect(res.body.toString()).not.toContain(server.secretAccessKey);
    expect(gw.logs()).not.toContain(server.secretAccessKey);
  });
});
