import { readdir } from 'node:fs/promises';
import net from 'node:net';
import http from '../../lib/node-http.ts';
import { gzipSync } from 'node:zlib';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import {
  contentDigest,
  parseMultipart,
  randomContent,
  request,
  sha256,
  type RawResponse,
} from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  ALL_STORE_KINDS,
  startStoreBacking,
  type StoreBacking,
  type StoreProbe,
} from '../../test/support/store-kinds.ts';
import { waitUntil } from '../../test/harness/index.ts';

const KiB = 1024;
const MiB = 1024 * KiB;
const MAX_UPLOAD = 50 * MiB + 64 * KiB;

/** Headers a HEAD must repeat from the GET (per-response ones excluded). */
function comparable(res: RawResponse): Record<string, unknown> {
  const { date: _d, 'x-request-id': _r, connection: _c, 'keep-alive': _k, ratelimit: _rl, ...rest } = res.headers;
  if (typeof rest['content-type'] === 'string')
    rest['content-type'] = rest['content-type'].replace(/boundary=\S+/, 'boundary=*');
  return rest;
}

// Conformance: the same content tests on the directory store, the static-HTTP store (nginx) and the
// S3 store on each real S3 server (SeaweedFS, MinIO).
describe.each(ALL_STORE_KINDS)('content API over real HTTP (%s store)', (kind) => {
  const db = useTestDatabase();
  let gw: GatewayProcess;
  let backing: StoreBacking;
  /** The store's objects seen from outside: the data dir, the directory nginx serves, or the bucket. */
  const probe = () => backing.probe(gw.dataDir);
  const nginx = () => backing.nginx!;
  let writer: { key: string; principalId: string };
  let readOnly: { key: string };
  const files = new Map<number, Buffer>();
  const base = () => `${gw.url}/api/v1/repositories/files`;
  const auth = () => bearer(writer.key);

  async function upload(id: string, data: Buffer, headers: Record<string, string> = {}): Promise<RawResponse> {
    return request(`${base()}/artifacts/${id}`, {
      method: 'PUT',
      headers: { ...auth(), 'content-type': 'application/x-test', 'content-digest': contentDigest(data), ...headers },
      body: data,
    });
  }
  const get = (id: string, headers: Record<string, string> = {}, method = 'GET') =>
    request(`${base()}/artifacts/${id}/content`, { method, headers: { ...auth(), ...headers } });

  beforeAll(async () => {
    await createRepository(db.pool, 'files');
    await createRepository(db.pool, 'hidden');
    writer = await createServiceAccount(db.pool, { grants: { files: 'write' } });
    readOnly = await createServiceAccount(db.pool, { scopes: ['read'], grants: { files: 'read' } });
    backing = await startStoreBacking(kind);
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_MAX_UPLOAD_BYTES: String(MAX_UPLOAD),
        ARKVORY_LOG_LEVEL: 'info',
        ...backing.env,
        ARKVORY_OPEN_FILE_CACHE_IDLE_SECONDS: '1',
      },
      timeoutMs: 60_000,
    });
    for (const size of [0, 1, 64 * KiB - 1, 64 * KiB + 1, 50 * MiB]) {
      const data = randomContent(size);
      files.set(size, data);
      const res = await upload(`size-${size}`, data);
      expect(res.status, res.body.toString()).toBe(201);
    }
  });

  it.each([0, 1, 64 * KiB - 1, 64 * KiB + 1, 50 * MiB])(
    '%i bytes come back identical, and HEAD repeats the GET headers without a body',
    async (size) => {
      const data = files.get(size)!;
      const res = await get(`size-${size}`);
      expect(res.status).toBe(200);
      expect(res.body.length).toBe(size);
      expect(sha256(res.body)).toBe(sha256(data));
      expect(res.headers).toMatchObject({
        'accept-ranges': 'bytes',
        etag: `"${sha256(data)}"`,
        'content-length': String(size),
        'content-type': 'application/x-test',
        'last-modified': expect.stringMatching(/ GMT$/),
      });
      const head = await get(`size-${size}`, {}, 'HEAD');
      expect(head.status).toBe(200);
      expect(head.body.length).toBe(0);
      expect(comparable(head)).toEqual(comparable(res));
      const meta = await request(`${base()}/artifacts/size-${size}`, { headers: auth() });
      expect(JSON.parse(meta.body.toString())).toMatchObject({
        repository: 'files',
        kind: 'artifact',
        id: `size-${size}`,
        sha256: sha256(data),
        sizeBytes: size,
        contentType: 'application/x-test',
        publishedBy: writer.principalId,
      });
    },
  );

  const size = 64 * KiB + 1;
  it.each([
    ['first byte', 'bytes=0-0', 0, 0],
    ['first 100', 'bytes=0-99', 0, 99],
    ['middle', 'bytes=1000-40000', 1000, 40000],
    ['open-ended', 'bytes=65000-', 65000, size - 1],
    ['last byte', `bytes=${size - 1}-${size - 1}`, size - 1, size - 1],
    ['suffix 1', 'bytes=-1', size - 1, size - 1],
    ['suffix 1000', 'bytes=-1000', size - 1000, size - 1],
    ['suffix longer than the file', 'bytes=-999999', 0, size - 1],
    ['last-pos past the end', 'bytes=100-99999999', 100, size - 1],
    ['overlapping ranges coalesced', 'bytes=0-100,50-200', 0, 200],
  ])('Range %s (%s) returns exactly those bytes; a HEAD ignores it', async (_name, range, start, end) => {
    const data = files.get(size)!;
    const res = await get(`size-${size}`, { range });
    expect(res.status).toBe(206);
    expect(res.headers['content-range']).toBe(`bytes ${start}-${end}/${size}`);
    expect(res.headers['content-length']).toBe(String(end - start + 1));
    expect(res.body.equals(data.subarray(start, end + 1))).toBe(true);
    // RFC 9110 §14.2: range handling is defined for GET only, and a server MUST ignore Range on
    // any other method: a HEAD gets the whole representation's 200 head.
    const head = await get(`size-${size}`, { range }, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers['content-range']).toBeUndefined();
    expect(comparable(head)).toEqual(comparable(await get(`size-${size}`)));
  });

  it('several ranges come as multipart/byteranges byte for byte: overlapping ones coalesced, disjoint ones in request order', async () => {
    const data = files.get(size)!;
    const res = await get(`size-${size}`, { range: 'bytes=60000-60099, 0-9, -5, 30000-' });
    expect(res.status).toBe(206);
    expect(res.headers['content-type']).toMatch(/^multipart\/byteranges; boundary=/);
    expect(Number(res.headers['content-length'])).toBe(res.body.length);
    const parts = parseMultipart(res.body, res.headers['content-type']!);
    // -5 lies inside 30000-: the server coalesces overlapping ranges into ascending order.
    expect(parts.map((p) => p.headers['content-range'])).toEqual([
      `bytes 0-9/${size}`,
      `bytes 30000-${size - 1}/${size}`,
    ]);
    for (const part of parts) {
      const [, s, e] = /^bytes (\d+)-(\d+)/.exec(part.headers['content-range']!)!.map(Number) as [
        number,
        number,
        number,
      ];
      expect(part.headers['content-type']).toBe('application/x-test');
      expect(part.data.equals(data.subarray(s, e + 1))).toBe(true);
    }

    const disjoint = await get(`size-${size}`, { range: 'bytes=60000-60099,0-9,-5' });
    const disjointParts = parseMultipart(disjoint.body, disjoint.headers['content-type']!);
    expect(disjointParts.map((p) => p.headers['content-range'])).toEqual([
      `bytes 60000-60099/${size}`,
      `bytes 0-9/${size}`,
      `bytes ${size - 5}-${size - 1}/${size}`,
    ]);
    expect(
      Buffer.concat(disjointParts.map((p) => p.data)).equals(
        Buffer.concat([data.subarray(60000, 60100), data.subarray(0, 10), data.subarray(size - 5)]),
      ),
    ).toBe(true);
    const head = await get(`size-${size}`, { range: 'bytes=60000-60099,0-9,-5' }, 'HEAD');
    expect(head.status).toBe(200);
    expect(comparable(head)).toEqual(comparable(await get(`size-${size}`)));
  });

  it('multiple ranges over the 50 MiB file, byte for byte', async () => {
    const data = files.get(50 * MiB)!;
    const res = await get(`size-${50 * MiB}`, { range: `bytes=0-1048575,${40 * MiB}-${45 * MiB - 1},-7` });
    const parts = parseMultipart(res.body, res.headers['content-type']!);
    expect(parts).toHaveLength(3);
    expect(parts[0]!.data.equals(data.subarray(0, MiB))).toBe(true);
    expect(parts[1]!.data.equals(data.subarray(40 * MiB, 45 * MiB))).toBe(true);
    expect(parts[2]!.data.equals(data.subarray(data.length - 7))).toBe(true);
  });

  it.each([
    ['start at the size', `bytes=${size}-`],
    ['zero suffix', 'bytes=-0'],
    ['every range past the end', `bytes=${size + 5}-${size + 10},${size * 2}-`],
  ])('416 with Content-Range bytes */size for %s; a HEAD ignores the Range (200)', async (_name, range) => {
    const res = await get(`size-${size}`, { range });
    expect(res.status).toBe(416);
    expect(res.headers['content-range']).toBe(`bytes */${size}`);
    expect(JSON.parse(res.body.toString())).toMatchObject({ code: 'range_not_satisfiable' });
    const head = await get(`size-${size}`, { range }, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers['content-range']).toBeUndefined();
    expect(head.headers['content-length']).toBe(String(size));
    expect(head.body.length).toBe(0);
  });

  it('a range from a position of an empty file is 416, a suffix one 200 (RFC 9110 §14.1.1); a malformed or foreign Range is ignored (200)', async () => {
    expect((await get('size-0', { range: 'bytes=0-' })).headers['content-range']).toBe('bytes */0');
    expect((await get('size-0', { range: 'bytes=0-' }, 'HEAD')).status).toBe(200);
    // A non-zero suffix is satisfiable whatever the size ("the last 10 bytes, or all if fewer"),
    // and no 206 can carry zero bytes: the whole, empty, body.
    for (const range of ['bytes=-10', 'bytes=0-,-1'])
      for (const method of ['GET', 'HEAD']) {
        const res = await get('size-0', { range }, method);
        expect(res.status, `${method} ${range}`).toBe(200);
        expect(res.headers['content-length']).toBe('0');
        expect(res.headers['content-range']).toBeUndefined();
      }
    expect((await get('size-0', { range: 'bytes=-0' })).status).toBe(416);
    for (const range of ['bytes=5-1', 'bytes=x-y', 'lines=1-2']) {
      const res = await get(`size-${size}`, { range });
      expect(res.status).toBe(200);
      expect(res.body.length).toBe(size);
    }
  });

  it('conditional requests: If-None-Match, If-Modified-Since and If-Range', async () => {
    const data = files.get(size)!;
    const full = await get(`size-${size}`);
    const etag = full.headers.etag!;
    const lastModified = full.headers['last-modified']!;
    const earlier = new Date(Date.parse(lastModified) - 1000).toUTCString();
    const later = new Date(Date.parse(lastModified) + 1000).toUTCString();

    for (const method of ['GET', 'HEAD']) {
      for (const headers of [
        { 'if-none-match': etag },
        { 'if-none-match': `W/${etag}` },
        { 'if-none-match': `"nope", ${etag}` },
        { 'if-none-match': '*' },
        { 'if-modified-since': lastModified },
        { 'if-modified-since': later },
      ] as Record<string, string>[]) {
        const res = await get(`size-${size}`, headers, method);
        expect(res.status, JSON.stringify(headers)).toBe(304);
        expect(res.body.length).toBe(0);
        expect(res.headers.etag).toBe(etag);
        // RFC 9110 §15.4.5: no representation metadata but ETag and Cache-Control (Last-Modified
        // only helps a cache without an ETag).
        expect(res.headers['cache-control']).toBe('private, no-cache');
        for (const name of ['last-modified', 'content-type', 'content-length', 'accept-ranges', 'repr-digest'])
          expect(res.headers[name], name).toBeUndefined();
      }
      for (const headers of [
        { 'if-none-match': '"nope"' },
        // A weak tag is compared weakly, but only an equal opaque tag matches.
        { 'if-none-match': 'W/"nope"' },
        { 'if-none-match': `W/"nope", W/"${etag.slice(1, -2)}"` },
        { 'if-modified-since': earlier },
        { 'if-none-match': '"nope"', 'if-modified-since': lastModified },
      ] as Record<string, string>[]) {
        expect((await get(`size-${size}`, headers, method)).status, JSON.stringify(headers)).toBe(200);
      }
    }

    const partial = await get(`size-${size}`, { range: 'bytes=10-19', 'if-range': etag });
    expect(partial.status).toBe(206);
    expect(partial.body.equals(data.subarray(10, 20))).toBe(true);
    for (const ifRange of ['"old"', `W/${etag}`, lastModified, earlier, later]) {
      const res = await get(`size-${size}`, { range: 'bytes=10-19', 'if-range': ifRange });
      expect(res.status, ifRange).toBe(200);
      expect(res.body.equals(data)).toBe(true);
    }
  });

  it('a read evaluates If-Match and If-Unmodified-Since: a resume naming a replaced version is 412, never the new bytes', async () => {
    const first = randomContent(4000);
    const second = randomContent(4000);
    expect((await upload('if-match-read', first)).status).toBe(201);
    const held = await get('if-match-read', {}, 'HEAD');
    const etag = held.headers.etag!;
    const lastModified = held.headers['last-modified']!;
    const earlier = new Date(Date.parse(lastModified) - 1000).toUTCString();
    for (const method of ['GET', 'HEAD']) {
      for (const headers of [
        { 'if-match': etag },
        { 'if-match': `"nope", ${etag}` },
        { 'if-match': '*' },
        { 'if-unmodified-since': lastModified },
        // Only without If-Match (RFC 9110 §13.2.2), and only an HTTP-date.
        { 'if-match': etag, 'if-unmodified-since': earlier },
        { 'if-unmodified-since': 'yesterday' },
      ] as Record<string, string>[]) {
        const res = await get('if-match-read', { ...headers, range: 'bytes=1000-' }, method);
        // A HEAD ignores Range (RFC 9110 §14.2).
        expect(res.status, `${method} ${JSON.stringify(headers)}`).toBe(method === 'GET' ? 206 : 200);
        if (method === 'GET') expect(res.body.equals(first.subarray(1000))).toBe(true);
      }
      for (const headers of [
        { 'if-match': '"nope"' },
        // If-Match compares strongly.
        { 'if-match': `W/${etag}` },
        { 'if-unmodified-since': earlier },
      ] as Record<string, string>[]) {
        const res = await get('if-match-read', { ...headers, range: 'bytes=1000-' }, method);
        expect(res.status, `${method} ${JSON.stringify(headers)}`).toBe(412);
        if (method === 'HEAD') expect(res.body.length).toBe(0);
        else expect(JSON.parse(res.body.toString()).code).toBe('precondition_failed');
      }
    }
    // The client holds bytes 0-999 of the first version and resumes on its ETag (wget, rclone, a
    // backup tool): the name now holds other bytes, which must not be spliced onto them.
    const removed = await request(`${base()}/artifacts/if-match-read`, { method: 'DELETE', headers: auth() });
    expect(removed.status).toBe(204);
    expect((await upload('if-match-read', second)).status).toBe(201);
    const resumed = await get('if-match-read', { range: 'bytes=1000-', 'if-match': etag });
    expect(resumed.status).toBe(412);
    expect(resumed.body.includes(second.subarray(1000, 1100))).toBe(false);
  });

  it('a name deleted and published again within its second gets a later Last-Modified: If-Modified-Since with the old one is 200 with the new bytes', async () => {
    const first = randomContent(4000);
    const second = randomContent(4000);
    const remove = async () =>
      expect((await request(`${base()}/artifacts/same-second`, { method: 'DELETE', headers: auth() })).status).toBe(
        204,
      );
    // Publish times have whole seconds: try until the second version is published within the second
    // the first one's Last-Modified names, by the gateway's Date (a try takes milliseconds).
    let before: string | undefined;
    let sameSecond = false;
    for (let attempt = 0; attempt < 20 && !sameSecond; attempt++) {
      if (attempt > 0) await remove();
      expect((await upload('same-second', first)).status).toBe(201);
      before = (await get('same-second', {}, 'HEAD')).headers['last-modified'];
      await remove();
      const published = await upload('same-second', second);
      expect(published.status).toBe(201);
      sameSecond = published.headers.date === before;
    }
    expect(sameSecond).toBe(true);
    // A client holding the first version revalidates with its date alone (wget -N, many caches).
    const res = await get('same-second', { 'if-modified-since': before! });
    expect(res.status).toBe(200);
    expect(res.body.equals(second)).toBe(true);
    // Dated a second after the first version; but never after the answer's own Date (RFC 9110
    // §8.8.2.1), which within that second is the first version's second still.
    const lastModified = Date.parse(res.headers['last-modified']!);
    expect(lastModified).toBeLessThanOrEqual(Date.parse(res.headers.date!));
    if (lastModified === Date.parse(before!)) expect(res.headers['last-modified']).toBe(res.headers.date);
    else expect(lastModified).toBeGreaterThan(Date.parse(before!));
    // Nor does it hold the second version unmodified since the first one's date.
    const put = await upload('same-second', second, { 'if-unmodified-since': before! });
    expect(put.status).toBe(412);
    // The client holds bytes 0-999 of the first version; a 206 would splice the two versions.
    const ranged = await get('same-second', { range: 'bytes=1000-', 'if-range': before! });
    expect(ranged.status).toBe(200);
    expect(ranged.body.equals(second)).toBe(true);
  });

  it('DELETE and PUT evaluate If-Match, If-Unmodified-Since and If-None-Match: 412 changes nothing', async () => {
    const first = randomContent(1000);
    const second = randomContent(1000);
    const path = `${base()}/artifacts/conditional-write`;
    const remove = (headers: Record<string, string>) =>
      request(path, { method: 'DELETE', headers: { ...auth(), ...headers } });
    expect((await upload('conditional-write', first)).status).toBe(201);
    const seen = (await get('conditional-write', {}, 'HEAD')).headers.etag!;
    // Another client replaces it: the name now holds other bytes.
    expect((await remove({})).status).toBe(204);
    expect((await upload('conditional-write', second)).status).toBe(201);
    const current = (await get('conditional-write', {}, 'HEAD')).headers;
    const earlier = new Date(Date.parse(current['last-modified']!) - 1000).toUTCString();
    for (const headers of [
      // The version this client saw is gone: deleting "it" must not delete the new one.
      { 'if-match': seen },
      { 'if-match': `W/${current.etag}` },
      { 'if-none-match': '*' },
      { 'if-none-match': `"x", W/${current.etag}` },
      { 'if-unmodified-since': earlier },
    ] as Record<string, string>[]) {
      const refused = await remove(headers);
      expect(refused.status, JSON.stringify(headers)).toBe(412);
      expect(JSON.parse(refused.body.toString())).toMatchObject({ code: 'precondition_failed' });
    }
    expect((await get('conditional-write')).body.equals(second)).toBe(true);
    // Create-only: the name is taken (even by the same bytes), and If-Match needs a current version.
    const taken = await upload('conditional-write', second, { 'if-none-match': '*' });
    expect(taken.status).toBe(412);
    const absent = await upload('conditional-absent', first, { 'if-match': '*' });
    expect(absent.status).toBe(412);
    expect((await get('conditional-absent')).status).toBe(404);
    expect((await upload('conditional-absent', first, { 'if-none-match': '*' })).status).toBe(201);
    expect((await upload('conditional-absent', first, { 'if-match': `"x", ${seen}` })).status).toBe(200);
    // Preconditions that hold: deleted.
    expect((await remove({ 'if-match': `"x", ${current.etag}`, 'if-unmodified-since': earlier })).status).toBe(204);
    expect((await get('conditional-write')).status).toBe(404);
    expect((await remove({ 'if-match': '*' })).status).toBe(404);
  });

  it('If-None-Match: * on two uploads of other bytes at once: one 201, the other 412 (not 409), whichever publishes first', async () => {
    const first = randomContent(3000);
    const second = randomContent(3000);
    const target = new URL(`${base()}/artifacts/create-race`);
    // The first upload's preconditions pass (its 100 Continue), then it holds its body back.
    const held = http.request(target, {
      method: 'PUT',
      agent: false,
      headers: {
        ...auth(),
        'content-type': 'application/x-test',
        'content-length': String(first.length),
        'if-none-match': '*',
        expect: '100-continue',
      },
    });
    const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
      held.on('response', (res) => {
        let body = '';
        res.on('data', (c: Buffer) => {
          body += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      held.on('error', reject);
    });
    await new Promise<void>((resolve) => held.once('continue', () => resolve()));
    // Another writer (one upload at a time per principal).
    const other = await createServiceAccount(db.pool, { grants: { files: 'write' } });
    const won = await upload('create-race', second, { ...bearer(other.key), 'if-none-match': '*' });
    expect(won.status).toBe(201);
    held.end(first);
    const late = await answer;
    expect(late.status, late.body).toBe(412);
    expect(JSON.parse(late.body)).toMatchObject({ code: 'precondition_failed' });
    expect((await get('create-race')).body.equals(second)).toBe(true);
  });

  it('publishing is immutable: same bytes 200, other bytes 409, digest or length mismatch 400 and nothing published', async () => {
    const data = randomContent(3000);
    expect((await upload('immutable', data)).status).toBe(201);
    const same = await upload('immutable', data);
    expect(same.status).toBe(200);
    expect(JSON.parse(same.body.toString())).toMatchObject({ sha256: sha256(data) });
    const other = randomContent(3000);
    const conflict = await upload('immutable', other);
    expect(conflict.status).toBe(409);
    expect(JSON.parse(conflict.body.toString())).toMatchObject({ code: 'conflict' });
    expect(sha256((await get('immutable')).body)).toBe(sha256(data));

    const wrongDigest = await upload('bad-digest', other, { 'content-digest': contentDigest(data) });
    expect(wrongDigest.status).toBe(400);
    expect(JSON.parse(wrongDigest.body.toString())).toMatchObject({ code: 'invalid_request' });
    expect((await request(`${base()}/artifacts/bad-digest`, { headers: auth() })).status).toBe(404);
    const malformed = await upload('bad-digest', other, { 'content-digest': 'sha-256=nope' });
    expect(malformed.status).toBe(400);
    const badType = await upload('bad-type', other, { 'content-type': 'not a type' });
    expect(badType.status).toBe(400);
    const blobs = await listBlobs(probe());
    expect(blobs).not.toContain(sha256(other));
    expect(await probe().files('tmp')).toEqual([]);

    // Content-Length shorter than promised: the client gives up mid-body; nothing is published.
    const truncated = await rawExchange(
      gw.port,
      `PUT /api/v1/repositories/files/artifacts/truncated HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${writer.key}\r\ncontent-length: 5000\r\n\r\n`,
      Buffer.alloc(1000, 1),
      { endAfterWrite: true },
    );
    expect(truncated).not.toMatch(/^HTTP\/1\.1 20/);
    expect((await request(`${base()}/artifacts/truncated`, { headers: auth() })).status).toBe(404);
  });

  it('a body with a content coding is refused with 415 and nothing published: the encoded bytes would be served as the artifact', async () => {
    const data = randomContent(3000);
    const encoded = gzipSync(data);
    for (const coding of ['gzip', 'br', 'identity, gzip']) {
      const refused = await upload('encoded', encoded, { 'content-encoding': coding });
      expect(refused.status, coding).toBe(415);
      expect(refused.headers['accept-encoding']).toBe('identity');
      expect(JSON.parse(refused.body.toString())).toMatchObject({ code: 'unsupported_content_encoding' });
    }
    expect((await request(`${base()}/artifacts/encoded`, { headers: auth() })).status).toBe(404);
    expect(await listBlobs(probe())).not.toContain(sha256(encoded));
    // `identity` is no coding at all.
    expect((await upload('plain', data, { 'content-encoding': 'identity' })).status).toBe(201);
    expect(sha256((await get('plain')).body)).toBe(sha256(data));
    // A transfer coding before `chunked` is left in the body by Node's parser: refused too (400).
    const chunk = `${encoded.length.toString(16)}\r\n`;
    const transferCoded = await rawExchange(
      gw.port,
      `PUT /api/v1/repositories/files/artifacts/transfer-coded HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${writer.key}\r\ntransfer-encoding: gzip, chunked\r\n\r\n${chunk}`,
      Buffer.concat([encoded, Buffer.from('\r\n0\r\n\r\n')]),
    );
    expect(transferCoded).toMatch(/^HTTP\/1\.1 400/);
    expect(transferCoded).toContain('"code":"invalid_request"');
    expect((await request(`${base()}/artifacts/transfer-coded`, { headers: auth() })).status).toBe(404);
  });

  it('413 before reading when Content-Length is over the limit, and while reading a chunked body', async () => {
    const reply = await rawExchange(
      gw.port,
      `PUT /api/v1/repositories/files/artifacts/too-big HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${writer.key}\r\ncontent-length: ${MAX_UPLOAD + 1}\r\n\r\n`,
      Buffer.alloc(0),
    );
    expect(reply).toMatch(/^HTTP\/1\.1 413/);
    expect(reply).toContain('"code":"payload_too_large"');

    async function* chunks() {
      for (let sent = 0; sent <= MAX_UPLOAD; sent += MiB) yield Buffer.alloc(MiB, 7);
    }
    const streamed = await request(`${base()}/artifacts/too-big`, {
      method: 'PUT',
      headers: { ...auth(), 'transfer-encoding': 'chunked' },
      body: chunks(),
    }).catch((err: Error) => ({ status: -1, body: Buffer.from(err.message), headers: {} }));
    expect(streamed.status).toBe(413);
    expect((await request(`${base()}/artifacts/too-big`, { headers: auth() })).status).toBe(404);
    expect(await probe().files('tmp')).toEqual([]);
  });

  it('enforces grants: read-only keys cannot upload or delete; invisible repositories are 404', async () => {
    const data = randomContent(10);
    const denied = await request(`${base()}/artifacts/ro`, {
      method: 'PUT',
      headers: bearer(readOnly.key),
      body: data,
    });
    expect(denied.status).toBe(403);
    expect(
      (await request(`${base()}/artifacts/size-1`, { method: 'DELETE', headers: bearer(readOnly.key) })).status,
    ).toBe(403);
    expect((await request(`${base()}/artifacts/size-1/content`, { headers: bearer(readOnly.key) })).status).toBe(200);
    expect(
      (await request(`${gw.url}/api/v1/repositories/hidden/artifacts/x/content`, { headers: auth() })).status,
    ).toBe(404);
    expect((await request(`${base()}/artifacts/size-1/content`)).status).toBe(401);
    expect((await get('no-such-artifact')).status).toBe(404);
  });

  it('lists readable repositories, serves package and asset paths, and DELETE removes only the catalog entry', async () => {
    const listing = await request(`${gw.url}/api/v1/repositories`, { headers: auth() });
    expect(JSON.parse(listing.body.toString())).toEqual({
      repositories: [{ name: 'files', permission: 'write' }],
      nextCursor: null,
    });
    const readListing = await request(`${gw.url}/api/v1/repositories`, { headers: bearer(readOnly.key) });
    expect(JSON.parse(readListing.body.toString())).toEqual({
      repositories: [{ name: 'files', permission: 'read' }],
      nextCursor: null,
    });

    const pkg = randomContent(2000);
    const asset = randomContent(3000);
    const put = (p: string, d: Buffer) =>
      request(`${base()}${p}`, { method: 'PUT', headers: { ...auth(), 'content-type': 'application/gzip' }, body: d });
    expect((await put('/packages/tool/1.0.0', pkg)).status).toBe(201);
    expect((await put('/packages/tool/1.0.0/assets/tool-linux.tar.gz', asset)).status).toBe(201);
    const pkgRes = await request(`${base()}/packages/tool/1.0.0/content`, {
      headers: { ...auth(), range: 'bytes=-10' },
    });
    expect(pkgRes.body.equals(pkg.subarray(-10))).toBe(true);
    const assetRes = await request(`${base()}/packages/tool/1.0.0/assets/tool-linux.tar.gz/content`, {
      headers: auth(),
    });
    expect(assetRes.body.equals(asset)).toBe(true);
    expect(assetRes.headers['content-type']).toBe('application/gzip');
    expect(
      JSON.parse((await request(`${base()}/packages/tool/1.0.0`, { headers: auth() })).body.toString()),
    ).toMatchObject({ kind: 'package', name: 'tool', version: '1.0.0' });

    const data = randomContent(500);
    expect((await upload('to-delete', data)).status).toBe(201);
    const del = await request(`${base()}/artifacts/to-delete`, { method: 'DELETE', headers: auth() });
    expect(del.status).toBe(204);
    expect((await get('to-delete')).status).toBe(404);
    expect((await request(`${base()}/artifacts/to-delete`, { method: 'DELETE', headers: auth() })).status).toBe(404);
    expect(await listBlobs(probe())).toContain(sha256(data));
    // The name is free again, even for other bytes.
    expect((await upload('to-delete', randomContent(10))).status).toBe(201);
  });

  it('a client that stops reading gets backpressure, not buffering; a disconnect closes the file (or the upstream request)', async () => {
    const pid = gw.child.pid!;
    const blob = sha256(files.get(50 * MiB)!);
    // nginx logs a request when it ends: the upstream GET must stay open while the client stalls.
    const upstreamDone = async () => (await nginx().accessLog()).split('\n').filter((l) => l.includes(blob));
    const doneBefore = kind === 'http' ? (await upstreamDone()).length : 0;
    const rssBefore = await rssBytes(pid);
    const socket = net.connect(gw.port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    // A stalled reader only: a reset when it is destroyed must not be an uncaught error.
    socket.on('error', () => {});
    socket.write(
      `GET /api/v1/repositories/files/artifacts/size-${50 * MiB}/content HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${writer.key}\r\n\r\n`,
    );
    socket.pause();
    if (kind === 'fs')
      await waitUntil(async () => (await openBlobFds(pid, blob)) > 0, {
        what: 'the reader to open the blob',
        timeoutMs: 10_000,
      });
    await new Promise((r) => setTimeout(r, 1500));
    const rssDuring = await rssBytes(pid);
    expect(rssDuring - rssBefore).toBeLessThan(20 * MiB);
    if (kind === 'http') expect((await upstreamDone()).length).toBe(doneBefore);
    socket.destroy();
    // The reader releases the descriptor to the open-file cache, which closes it once idle (1 s here).
    if (kind === 'fs')
      await waitUntil(async () => (await openBlobFds(pid, blob)) === 0, {
        what: 'the idle descriptor to be closed',
        timeoutMs: 10_000,
      });
    else if (kind === 'http') {
      await waitUntil(async () => (await upstreamDone()).length === doneBefore + 1, {
        what: 'the upstream transfer to end',
        timeoutMs: 10_000,
      });
      const bytesSent = Number((await upstreamDone()).at(-1)!.split(' ')[1]);
      expect(bytesSent).toBeLessThan(50 * MiB);
    }
  });
});

async function listBlobs(probe: StoreProbe): Promise<string[]> {
  const out: string[] = [];
  const base = 'blobs/sha256';
  for (const a of await probe.list(base))
    for (const b of await probe.list(`${base}/${a}`)) out.push(...(await probe.list(`${base}/${a}/${b}`)));
  return out;
}

async function rssBytes(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

async function openBlobFds(pid: number, sha: string): Promise<number> {
  const { readlink } = await import('node:fs/promises');
  let n = 0;
  for (const fd of await readdir(`/proc/${pid}/fd`)) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    if (target.endsWith(sha)) n++;
  }
  return n;
}

/** Writes a raw request, optionally half-closes, and returns whatever the server answered. */
function rawExchange(
  port: number,
  head: string,
  body: Buffer,
  options: { endAfterWrite?: boolean } = {},
): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    socket.on('data', (d) => {
      text += d.toString('latin1');
      if (/\r\n\r\n/.test(text) && /content-length: (\d+)/i.test(text)) {
        const len = Number(/content-length: (\d+)/i.exec(text)![1]);
        if (text.length - text.indexOf('\r\n\r\n') - 4 >= len) socket.destroy();
      }
    });
    socket.on('close', () => resolve(text));
    socket.on('error', () => {});
    socket.write(head);
    socket.write(body);
    if (options.endAfterWrite) socket.end();
  });
}
