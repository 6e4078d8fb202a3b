/**
 * A real nginx standing where an artifact store (S3, path-style, or the static store) would be, and
 * answering as a broken one or a proxy in its path might: with a 64 MiB body where a small one
 * belongs, or with a small body trickled at 200 bytes/s (never silent for long, never done within a
 * storage timeout of seconds). Its access log says how much of each body was sent before the
 * request ended: a connection closed at once ends it early; a body left half-read in a pool would
 * keep nginx sending until its send_timeout, set far beyond any wait here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { StorageError } from '../../storage-adapter/errors.ts';
import { freeLoopbackPort, makeTempDir, waitUntil, writeNginxConf } from '../harness/index.ts';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
export const HUGE_BYTES = 64 * 1024 * 1024;
export const SLOW_BYTES = 60 * 1024;
/** The object `/range/whole` answers whole (200) whatever Range asks. */
export const WHOLE_BYTES = 1024 * 1024 * 1024;
/** The object size the `/range/short-…` answers claim in their Content-Range. */
export const RANGE_OBJECT_BYTES = 1000;
const SLOW_RATE = 200;
/**
 * What bucket `complete-bucket` answers CompleteMultipartUpload with (200): the XML declaration and
 * the whitespace AWS sends to keep the connection alive while it completes, and then nothing.
 */
export const COMPLETE_WHITESPACE = `<?xml version="1.0" encoding="UTF-8"?>${' '.repeat(64)}`;
/** The one key bucket `foreign-bucket` lists, whatever prefix is asked. */
export const FOREIGN_KEY = `blobs/sha256/aa/bb/${'a'.repeat(64)}`;

export interface MisbehavingStore {
  /**
   * `http://127.0.0.1:<port>`. S3: bucket `bucket` answers its listings 200 and its objects 503, each
   * with the huge body; bucket `slow-bucket` the same, trickled. Static store: `/static/` has a huge
   * `tmp/` listing and `storage-id`; `/slow-static/` a trickled `storage-id` and a 503 with a
   * trickled body for everything under `gone/`. `/slow-put/…` answers any PUT 503 with a trickled body.
   * Ranged GETs (any Range): `/range/short-range` answers 206 `bytes 0-99/1000` with 100 bytes;
   * `/range/short-body` 206 `bytes 0-199/1000` with 100 bytes (Content-Length 100, a clean end);
   * `/range/long-body` 206 `bytes 0-99/1000` with 200 bytes (Content-Length 200);
   * `/range/whole` ignores Range and answers 200 with the whole 1 GiB object.
   * Listings of a broken or hostile store: bucket `foreign-bucket` lists `FOREIGN_KEY` whatever
   * prefix is asked (and answers any DELETE 204), `loop-bucket` lists `p/k` on a truncated page whose
   * continuation token is always the same, `notoken-bucket` the same page with no token at all,
   * `portal-bucket` an HTML page (200) for its listings, `complete-bucket` takes multipart uploads
   * (UploadId `u`, parts answered with ETag `"p"`) and answers their completion 200 with only
   * `COMPLETE_WHITESPACE` (a completion cut off after its keep-alive bytes), any DELETE 204, `dotdot-bucket` a common prefix `tmp/../`; the static
   * `/dotdot-static/tmp/` autoindex lists a directory named `..`, and `/noname-static/tmp/`'s entries without a name. Objects of `nolength-bucket` are
   * answered (HEAD too) without a Content-Length (a body filter, as a rewriting proxy would).
   */
  base: string;
  /** Bytes nginx sent for the finished request whose line contains `target`, once it finished. */
  sentFor(target: string): Promise<number>;
  /** The access log's lines so far (`<status> <bytes sent> "<request line>"`). */
  requests(): Promise<string[]>;
}

/** The file's misbehaving store, started before its tests and stopped after them. */
export function useMisbehavingStore(): MisbehavingStore {
  let dir: string | undefined;
  let nginx: ChildProcess | undefined;
  const store: MisbehavingStore = {
    base: '',
    async requests() {
      const log = await readFile(path.join(dir!, 'access.log'), 'utf8').catch(() => '');
      return log.split('\n').filter((l) => l !== '');
    },
    async sentFor(target) {
      let sent: number | undefined;
      await waitUntil(
        async () => {
          const log = await readFile(path.join(dir!, 'access.log'), 'utf8').catch(() => '');
          const line = log.split('\n').find((l) => l.includes(target));
          sent = line === undefined ? undefined : Number(line.split(' ')[1]);
          return sent !== undefined;
        },
        // Far below send_timeout: only a closed connection ends the request this early.
        { what: `nginx to finish ${target}`, timeoutMs: 60_000 },
      );
      return sent!;
    },
  };
  beforeAll(async () => {
    if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
    dir = await makeTempDir('arkvory-misbehaving-store-');
    const huge = path.join(dir, 'huge');
    // Sparse: nginx sends 64 MiB of zeros without the disk holding them.
    await writeFile(huge, '');
    await truncate(huge, HUGE_BYTES);
    const whole = path.join(dir, 'whole');
    await writeFile(whole, '');
    await truncate(whole, WHOLE_BYTES);
    const slow = path.join(dir, 'slow');
    await writeFile(slow, Buffer.alloc(SLOW_BYTES, 'x'));
    const port = await freeLoopbackPort();
    const conf = await writeNginxConf(dir, {
      http: `log_format sent '$status $body_bytes_sent "$request"';
access_log ${dir}/access.log sent;
send_timeout 600s;
server {
  listen 127.0.0.1:${port};
  location = /bucket { default_type application/xml; alias ${huge}; }
  location /bucket/ { return 503; }
  error_page 503 /huge-error;
  location = /huge-error { internal; default_type application/xml; alias ${huge}; }
  location = /static/tmp/ { default_type application/json; root ${dir}; try_files /huge =404; }
  location = /static/storage-id { default_type text/plain; alias ${huge}; }
  location = /slow-bucket { default_type application/xml; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location /slow-bucket/ { error_page 503 /slow-error; return 503; }
  location = /slow-error { internal; default_type application/xml; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location = /slow-static/storage-id { default_type text/plain; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location /slow-static/gone/ { error_page 503 /slow-error; return 503; }
  location /slow-put/ { client_max_body_size 0; error_page 503 /slow-error; return 503; }
  location = /range/short-range { add_header Content-Range "bytes 0-99/${RANGE_OBJECT_BYTES}" always; return 206 "${'x'.repeat(100)}"; }
  location = /range/short-body { add_header Content-Range "bytes 0-199/${RANGE_OBJECT_BYTES}" always; return 206 "${'x'.repeat(100)}"; }
  location = /range/long-body { add_header Content-Range "bytes 0-99/${RANGE_OBJECT_BYTES}" always; return 206 "${'x'.repeat(200)}"; }
  location = /range/whole { max_ranges 0; default_type application/octet-stream; alias ${whole}; }
  location = /foreign-bucket { default_type application/xml; return 200 '<ListBucketResult><Contents><Key>${FOREIGN_KEY}</Key><Size>1</Size></Contents><IsTruncated>false</IsTruncated></ListBucketResult>'; }
  location /foreign-bucket/ { return 204; }
  location = /loop-bucket { default_type application/xml; return 200 '<ListBucketResult><Contents><Key>p/k</Key><Size>1</Size></Contents><IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken></ListBucketResult>'; }
  location = /notoken-bucket { default_type application/xml; return 200 '<ListBucketResult><Contents><Key>p/k</Key><Size>1</Size></Contents><IsTruncated>true</IsTruncated></ListBucketResult>'; }
  location /nolength-bucket/ { default_type text/html; sub_filter_once on; sub_filter 'x' 'y'; alias ${dir}/; try_files /slow =404; }
  location /complete-bucket/ {
    client_max_body_size 0;
    default_type application/xml;
    if ($args ~ "^uploads=") { return 200 '<InitiateMultipartUploadResult><UploadId>u</UploadId></InitiateMultipartUploadResult>'; }
    if ($request_method = PUT) { add_header ETag '"p"' always; return 200 ''; }
    if ($request_method = DELETE) { return 204; }
    return 200 '${COMPLETE_WHITESPACE}';
  }
  location = /portal-bucket { default_type text/html; return 200 '<html><body><p>Sign in to continue</p></body></html>'; }
  location = /dotdot-bucket { default_type application/xml; return 200 '<ListBucketResult><CommonPrefixes><Prefix>tmp/../</Prefix></CommonPrefixes><IsTruncated>false</IsTruncated></ListBucketResult>'; }
  location = /noname-static/tmp/ { default_type application/json; return 200 '[null,{"type":"file","size":1}]'; }
  location = /dotdot-static/tmp/ { default_type application/json; return 200 '[{"name":"..","type":"directory"}]'; }
}`,
    });
    const child = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    nginx = child;
    let output = '';
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    store.base = `http://127.0.0.1:${port}`;
    await waitUntil(
      async () => {
        if (child.exitCode !== null) throw new Error(`nginx did not start: ${output}`);
        return fetch(`${store.base}/none`).then(
          (r) => r.body?.cancel().then(() => true) ?? true,
          () => false,
        );
      },
      { what: 'nginx to listen', timeoutMs: 10_000 },
    );
  });
  afterAll(async () => {
    if (nginx && nginx.exitCode === null) {
      const exited = new Promise((r) => nginx!.once('exit', r));
      nginx.kill('SIGTERM');
      await exited;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return store;
}

/** The StorageError `work` fails with (the test fails if it succeeds or fails otherwise). */
export async function storageFailureOf(work: () => Promise<unknown>): Promise<StorageError> {
  const err = await work().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StorageError);
  return err as StorageError;
}
