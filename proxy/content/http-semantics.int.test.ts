/**
 * HTTP semantics of the content and metadata routes as curl sees them (RFC 9110), over HTTP/1.1 and
 * HTTP/2 (TLS, as the gateway serves HTTP/2): a Range that is not a ranges-specifier, the fields of
 * a 304, 412 and 416, the metadata route's validators and conditional requests, fields a request
 * repeats, and empty lists, leap seconds and what is OWS in preconditions.
 * The directory store: these are the gateway's own answers, the same on every store
 * (content.int.test.ts runs the byte semantics on all of them).
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { contentDigest, randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway, type GatewayProcess } from '../../test/support/gateway.ts';
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueServerCertificate,
} from '../../test/harness/index.ts';

const run = promisify(execFile);

interface CurlAnswer {
  readonly status: number;
  /** Names in lower case. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
}

describe('HTTP semantics of the content and metadata routes, through curl', () => {
  const db = useTestDatabase();
  let gw: GatewayProcess;
  let ca: CertificateAuthority;
  let key: string;
  const data = randomContent(5000);
  const origin = () => `https://127.0.0.1:${gw.port}`;
  const base = () => `${origin()}/api/v1/repositories/sem/artifacts`;
  const auth = () => ['-H', `authorization: Bearer ${key}`];
  const put = (id: string, body: Buffer, contentType = 'text/html') =>
    request(`${base()}/${id}`, {
      method: 'PUT',
      headers: { ...bearer(key), 'content-type': contentType, 'content-digest': contentDigest(body) },
      body,
      ca: ca.certPem,
    });

  /**
   * One request by curl (HTTP/1.1 unless `--http2` is among `args`; nothing decoded): its final
   * head (`-i`) and its body as received.
   */
  async function curl(url: string, args: readonly string[]): Promise<CurlAnswer> {
    const version = args.includes('--http2') ? [] : ['--http1.1'];
    const { stdout } = await run('curl', ['-sS', ...version, '--cacert', ca.certFile, '-i', ...args, url], {
      encoding: 'buffer',
      timeout: 10_000,
    });
    let rest = stdout;
    for (;;) {
      const end = rest.indexOf('\r\n\r\n');
      const [statusLine, ...lines] = rest.subarray(0, end).toString('latin1').split('\r\n');
      rest = rest.subarray(end + 4);
      const status = Number(statusLine!.split(' ')[1]);
      // A 1xx head (100 Continue) comes before the answer's own.
      if (status < 200) continue;
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      return { status, headers, body: rest };
    }
  }

  beforeAll(async () => {
    const dir = await makeTempDir('arkvory-semantics-');
    ca = await createCertificateAuthority(dir);
    const server = await issueServerCertificate(ca, dir);
    await createRepository(db.pool, 'sem');
    ({ key } = await createServiceAccount(db.pool, { grants: { sem: 'write' } }));
    gw = await startGateway({
      env: {
        ARKVORY_DATABASE_URL: db.url,
        ARKVORY_LOG_LEVEL: 'info',
        ARKVORY_TLS_CERT_FILE: server.certFile,
        ARKVORY_TLS_KEY_FILE: server.keyFile,
      },
      waitFor: 'none',
    });
    // Serving once its health answers 200 over TLS.
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (gw.child.exitCode !== null) throw new Error(`gateway exited:\n${gw.logs()}`);
      const status = await curl(`${origin()}/health/status`, []).then(
        (r) => r.status,
        () => 0,
      );
      if (status === 200) break;
      if (Date.now() > deadline) throw new Error(`not serving:\n${gw.logs().slice(-3000)}`);
      await sleep(100);
    }
    expect((await put('page.html', data)).status).toBe(201);
  });

  it('a Range with whitespace around its "=" is no ranges-specifier (RFC 9110 §14.1.1): ignored, the whole body with 200', async () => {
    const url = `${base()}/page.html/content`;
    for (const range of ['bytes = 0-1', 'bytes =0-1', 'bytes= 0-1', 'bytes=\t0-1']) {
      const res = await curl(url, [...auth(), '-H', `range: ${range}`]);
      expect(res.status, range).toBe(200);
      expect(res.headers['content-range'], range).toBeUndefined();
      expect(res.body.equals(data), range).toBe(true);
    }
    // Whitespace around the commas is the list syntax (§5.6.1.2), and the unit is case-insensitive.
    const part = await curl(url, [...auth(), '-H', 'range: Bytes=10-19 ,\t2000-2009']);
    expect(part.status).toBe(206);
    expect(part.headers['content-type']).toMatch(/^multipart\/byteranges; boundary=/);
    expect(part.body.includes(data.subarray(10, 20))).toBe(true);
    expect(part.body.includes(data.subarray(2000, 2010))).toBe(true);
  });

  it('a 304 carries ETag and Cache-Control, no other representation metadata (RFC 9110 §15.4.5)', async () => {
    const url = `${base()}/page.html/content`;
    const full = await curl(url, auth());
    expect(full.headers).toMatchObject({ 'content-disposition': 'attachment', 'accept-ranges': 'bytes' });
    for (const conditional of [
      `if-none-match: ${full.headers.etag}`,
      `if-modified-since: ${full.headers['last-modified']}`,
    ])
      for (const method of [[], ['-I']]) {
        const res = await curl(url, [...auth(), ...method, '-H', conditional]);
        expect(res.status, conditional).toBe(304);
        // Besides the answer's own (Date, X-Request-Id, the rate limit's) and the connection's.
        const fields = Object.keys(res.headers).filter(
          (name) =>
            !['date', 'x-request-id', 'ratelimit', 'ratelimit-policy', 'connection', 'keep-alive'].includes(name),
        );
        expect(fields.sort(), conditional).toEqual([
          'cache-control',
          'content-security-policy',
          'etag',
          'x-content-type-options',
        ]);
        expect(res.headers.date).toMatch(/ GMT$/);
        expect(res.headers).toMatchObject({ etag: full.headers.etag, 'cache-control': 'private, no-cache' });
      }
  });

  it('the metadata route has Last-Modified and its own strong ETag, and evaluates preconditions; writes take either tag', async () => {
    const body = randomContent(300);
    expect((await put('meta.bin', body, 'application/octet-stream')).status).toBe(201);
    const url = `${base()}/meta.bin`;
    const got = await curl(url, auth());
    expect(got.status).toBe(200);
    const meta = JSON.parse(got.body.toString()) as { createdAt: string; sha256: string };
    expect(meta.sha256).toBe(sha256(body));
    const etag = got.headers.etag!;
    expect(etag).toBe(`"${sha256(body)}.m1.${Date.parse(meta.createdAt)}"`);
    expect(got.headers['last-modified']).toBe(new Date(meta.createdAt).toUTCString());
    const head = await curl(url, [...auth(), '-I']);
    expect(head.status).toBe(200);
    expect(head.headers).toMatchObject({ etag, 'last-modified': got.headers['last-modified'] });

    for (const conditional of [`if-none-match: ${etag}`, `if-modified-since: ${got.headers['last-modified']}`]) {
      const res = await curl(url, [...auth(), '-H', conditional]);
      expect(res.status, conditional).toBe(304);
      expect(res.body.length).toBe(0);
      expect(res.headers.etag).toBe(etag);
      expect(res.headers['last-modified']).toBeUndefined();
    }
    // The bytes' tag names the bytes, not this JSON.
    expect((await curl(url, [...auth(), '-H', `if-none-match: "${sha256(body)}"`])).status).toBe(200);
    for (const conditional of ['if-match: "other"', `if-match: "${sha256(body)}"`]) {
      const res = await curl(url, [...auth(), '-H', conditional]);
      expect(res.status, conditional).toBe(412);
      expect(JSON.parse(res.body.toString()).code).toBe('precondition_failed');
    }
    expect((await curl(url, [...auth(), '-H', `if-match: ${etag}`])).status).toBe(200);

    // Deleted and published again with the same bytes: other metadata, another tag; the old one's
    // If-None-Match gets the new JSON, and a DELETE on the old tag is refused.
    const removed = await curl(url, [...auth(), '-X', 'DELETE', '-H', `if-match: ${etag}`]);
    expect(removed.status).toBe(204);
    expect((await put('meta.bin', body, 'text/plain')).status).toBe(201);
    const again = await curl(url, [...auth(), '-H', `if-none-match: ${etag}`]);
    expect(again.status).toBe(200);
    expect(JSON.parse(again.body.toString())).toMatchObject({ sha256: sha256(body), contentType: 'text/plain' });
    expect(again.headers.etag).not.toBe(etag);
    expect((await curl(url, [...auth(), '-X', 'DELETE', '-H', `if-match: ${etag}`])).status).toBe(412);
    // The bytes' tag still names the version for a write, as it did.
    expect((await curl(url, [...auth(), '-X', 'DELETE', '-H', `if-match: "${sha256(body)}"`])).status).toBe(204);
  });

  it('a date field sent twice is a list, no HTTP-date: ignored (RFC 9110 §13.1.3, §13.1.4), not its first one evaluated', async () => {
    const url = `${base()}/page.html/content`;
    const full = await curl(url, [...auth(), '-I']);
    const lastModified = full.headers['last-modified']!;
    const earlier = new Date(Date.parse(lastModified) - 1000).toUTCString();
    for (const version of [[], ['--http2']]) {
      // Each alone: 304, 412.
      expect((await curl(url, [...auth(), ...version, '-H', `if-modified-since: ${lastModified}`])).status).toBe(304);
      expect((await curl(url, [...auth(), ...version, '-H', `if-unmodified-since: ${earlier}`])).status).toBe(412);
      const twice = (name: string, first: string) => [
        ...auth(),
        ...version,
        '-H',
        `${name}: ${first}`,
        '-H',
        `${name}: ${earlier}`,
      ];
      for (const [name, first] of [
        ['if-modified-since', lastModified],
        ['if-unmodified-since', earlier],
      ] as const) {
        const res = await curl(url, twice(name, first));
        expect(res.status, `${version.join('')} ${name} twice`).toBe(200);
        expect(res.body.equals(data)).toBe(true);
      }
    }
  });

  it('over HTTP/2 a second If-None-Match or If-Match still counts: a DELETE is refused when one names the current version', async () => {
    const body = randomContent(100);
    expect((await put('twice.bin', body)).status).toBe(201);
    const url = `${base()}/twice.bin`;
    const etag = `"${sha256(body)}"`;
    const h2 = [...auth(), '--http2', '-X', 'DELETE'];
    const refused = await curl(url, [...h2, '-H', 'if-none-match: "other"', '-H', `if-none-match: ${etag}`]);
    expect(refused.status).toBe(412);
    // If-Match: the first names another version, the second this one: a list that holds.
    const content = `${url}/content`;
    const read = await curl(content, [...auth(), '--http2', '-H', 'if-match: "other"', '-H', `if-match: ${etag}`]);
    expect(read.status).toBe(200);
    expect(read.body.equals(body)).toBe(true);
    expect((await curl(url, [...h2, '-H', 'if-none-match: "other"'])).status).toBe(204);
  });

  it('If-Range is one entity-tag, not a list; a tag with a space in it is malformed: a write is refused', async () => {
    const url = `${base()}/page.html/content`;
    const etag = `"${sha256(data)}"`;
    expect((await curl(url, [...auth(), '-H', 'range: bytes=0-9', '-H', `if-range: ${etag}`])).status).toBe(206);
    for (const ifRange of [`${etag},`, `, ${etag}`]) {
      const res = await curl(url, [...auth(), '-H', 'range: bytes=0-9', '-H', `if-range: ${ifRange}`]);
      expect(res.status, ifRange).toBe(200);
      expect(res.body.equals(data)).toBe(true);
    }
    // etagc has no space (RFC 9110 §8.8.3): a malformed If-None-Match refuses a write, as documented.
    const body = randomContent(50);
    expect((await put('spaced.bin', body)).status).toBe(201);
    const refused = await curl(`${base()}/spaced.bin`, [...auth(), '-X', 'DELETE', '-H', 'if-none-match: "a b"']);
    expect(refused.status).toBe(412);
    expect((await curl(`${base()}/spaced.bin`, [...auth(), '-I'])).status).toBe(200);
  });

  it('a 412 and a 416 carry no Content-Disposition (their content is the JSON error), the validators still', async () => {
    const url = `${base()}/page.html/content`;
    const full = await curl(url, auth());
    expect(full.headers['content-disposition']).toBe('attachment');
    for (const version of [[], ['--http2']]) {
      const failed = await curl(url, [...auth(), ...version, '-H', 'if-match: "other"']);
      const unsatisfiable = await curl(url, [...auth(), ...version, '-H', `range: bytes=${data.length}-`]);
      expect([failed.status, unsatisfiable.status], version.join('')).toEqual([412, 416]);
      for (const res of [failed, unsatisfiable]) {
        expect(res.headers['content-disposition'], `${version.join('')} ${res.status}`).toBeUndefined();
        expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
        expect(res.headers).toMatchObject({ etag: full.headers.etag, 'last-modified': full.headers['last-modified'] });
      }
      expect(unsatisfiable.headers['content-range']).toBe(`bytes */${data.length}`);
    }
  });

  it('an empty If-None-Match names no version and holds, an empty If-Match fails; a leap second is a date; only OWS is dropped', async () => {
    const url = `${base()}/page.html/content`;
    // A leap second (RFC 9110 §5.6.7) after the publish: not modified since.
    const leap = await curl(url, [...auth(), '-H', 'if-modified-since: Wed, 31 Dec 2036 23:59:60 GMT']);
    expect(leap.status).toBe(304);
    // A no-break space (a raw 0xA0 byte, obs-text) before the tag: no OWS, so a malformed If-Match.
    const dir = await makeTempDir('arkvory-semantics-nbsp-');
    const nbsp = join(dir, 'if-match');
    await writeFile(
      nbsp,
      Buffer.concat([Buffer.from('if-match: '), Buffer.from([0xa0]), Buffer.from(`"${sha256(data)}"\n`)]),
    );
    expect((await curl(url, [...auth(), '-H', `@${nbsp}`])).status).toBe(412);
    for (const version of [[], ['--http2']]) {
      const body = randomContent(60);
      const id = `empty-list${version.join('')}.bin`;
      expect((await put(id, body)).status).toBe(201);
      const remove = (header: string) => curl(`${base()}/${id}`, [...auth(), ...version, '-X', 'DELETE', '-H', header]);
      // curl's `name;` sends the field with an empty value.
      expect((await remove('if-match;')).status, `${version.join('')} If-Match`).toBe(412);
      expect((await remove('if-none-match;')).status, `${version.join('')} If-None-Match`).toBe(204);
      expect((await curl(`${base()}/${id}`, [...auth(), '-I'])).status).toBe(404);
    }
  });
});
