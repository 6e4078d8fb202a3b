/**
 * Answer bodies the stores read whole stay under their caps, against a real nginx standing where
 * the store would be and answering with a 64 MiB body: the S3 client's listing pages and error
 * bodies, the static store's JSON listing and `storage-id`. Each read fails as 502
 * `upstream_unreachable` naming the cap, and its connection is closed at once: nginx logs the
 * request as finished well short of the body (a body left half-read in the pool would keep nginx
 * sending until its send_timeout, set far beyond the wait here). A body under its cap but trickled
 * (nginx's limit_rate: 60 KiB at 200 bytes/s, never silent for the storage timeout) fails as 504
 * `upstream_timeout` once the storage timeout has passed, not minutes later; an error answer's body,
 * drained to keep its connection, is given up on then too, as is a socket PUT's answer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort, makeTempDir, waitUntil, writeNginxConf } from '../../test/harness/index.ts';
import { STORAGE_ERRORS, StorageError } from '../errors.ts';
import { httpIdentity, httpTree } from '../http/http-tree.ts';
import { WebDavClient } from '../http/http-webdav.ts';
import { readStorageIdObject } from '../http/http-store.ts';
import { createS3Client } from '../s3/s3-client.ts';
import { putOverSocket } from '../s3/s3-socket-write.ts';
import { BODY_CAPS } from './bounded-body.ts';

const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));
const HUGE_BYTES = 64 * 1024 * 1024;
const SLOW_BYTES = 60 * 1024;
const SLOW_RATE = 200;
const upstream = { connectTimeoutMs: 5000, timeoutMs: 30_000 };

let dir: string;
let nginx: ChildProcess | undefined;
let base: string;

beforeAll(async () => {
  if (!NGINX) throw new Error('nginx is not installed; on Debian: apt-get install -y nginx-light');
  dir = await makeTempDir('arkvory-huge-bodies-');
  const huge = path.join(dir, 'huge');
  // Sparse: nginx sends 64 MiB of zeros without the disk holding them.
  await writeFile(huge, '');
  await truncate(huge, HUGE_BYTES);
  const slow = path.join(dir, 'slow');
  await writeFile(slow, Buffer.alloc(SLOW_BYTES, 'x'));
  const port = await freeLoopbackPort();
  const conf = await writeNginxConf(dir, {
    http: `log_format sent '$status $body_bytes_sent "$request"';
access_log ${dir}/access.log sent;
send_timeout 600s;
server {
  listen 127.0.0.1:${port};
  # S3, path-style: the bucket's listings answer 200, its objects 503, each with the huge body.
  location = /bucket { default_type application/xml; alias ${huge}; }
  location /bucket/ { return 503; }
  error_page 503 /huge-error;
  location = /huge-error { internal; default_type application/xml; alias ${huge}; }
  # The static store: a directory listing and storage-id.
  location = /static/tmp/ { default_type application/json; root ${dir}; try_files /huge =404; }
  location = /static/storage-id { default_type text/plain; alias ${huge}; }
  # The same, trickled: never silent for long, never done within the storage timeout.
  location = /slow-bucket { default_type application/xml; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location /slow-bucket/ { error_page 503 /slow-error; return 503; }
  location = /slow-error { internal; default_type application/xml; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location = /slow-static/storage-id { default_type text/plain; limit_rate ${SLOW_RATE}; alias ${slow}; }
  location /slow-static/gone/ { error_page 503 /slow-error; return 503; }
  location /slow-put/ { client_max_body_size 0; error_page 503 /slow-error; return 503; }
}`,
  });
  nginx = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  nginx.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  base = `http://127.0.0.1:${port}`;
  await waitUntil(
    async () => {
      if (nginx!.exitCode !== null) throw new Error(`nginx did not start: ${output}`);
      return fetch(`${base}/none`).then(
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

/** Bytes nginx sent for the finished request whose line contains `target`, once it finished. */
async function sentFor(target: string): Promise<number> {
  let sent: number | undefined;
  await waitUntil(
    async () => {
      const log = await readFile(path.join(dir, 'access.log'), 'utf8').catch(() => '');
      const line = log.split('\n').find((l) => l.includes(target));
      sent = line === undefined ? undefined : Number(line.split(' ')[1]);
      return sent !== undefined;
    },
    // Far below send_timeout: only a closed connection ends the request this early.
    { what: `nginx to finish ${target}`, timeoutMs: 60_000 },
  );
  return sent!;
}

async function failureOf(work: () => Promise<unknown>): Promise<StorageError> {
  const err = await work().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StorageError);
  return err as StorageError;
}

describe('bodies read whole from a store are capped (real nginx answering 64 MiB)', () => {
  it('an S3 listing page past its cap is 502 upstream_unreachable and its connection is closed', async () => {
    const client = createS3Client({
      ...upstream,
      endpoint: base,
      region: 'us-east-1',
      bucket: 'bucket',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    });
    try {
      const err = await failureOf(async () => {
        for await (const _ of client.list('listing-prefix/')) void _;
      });
      expect(err.code).toBe('upstream_unreachable');
      expect(STORAGE_ERRORS.entries.upstream_unreachable.status).toBe(502);
      expect(err.message).toContain(`over ${BODY_CAPS.s3Page} bytes`);
      expect(await sentFor('listing-prefix')).toBeLessThan(HUGE_BYTES / 2);
    } finally {
      await client.close();
    }
  });

  it('an S3 error body past its cap is 502 upstream_unreachable naming the status, its connection closed', async () => {
    const client = createS3Client({
      ...upstream,
      endpoint: base,
      region: 'us-east-1',
      bucket: 'bucket',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    });
    try {
      const err = await failureOf(() => client.delete('error-object'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('(503)');
      expect(err.message).toContain(`over ${BODY_CAPS.small} bytes`);
      expect(await sentFor('error-object')).toBeLessThan(HUGE_BYTES / 2);
    } finally {
      await client.close();
    }
  });

  it("the static store's JSON listing and storage-id past their caps are 502 upstream_unreachable", async () => {
    const dav = new WebDavClient(`${base}/static/`, upstream);
    try {
      const listing = await failureOf(() => httpTree(dav).list('tmp'));
      expect(listing.code).toBe('upstream_unreachable');
      expect(listing.message).toContain(`over ${BODY_CAPS.autoindex} bytes`);
      expect(await sentFor('/static/tmp/')).toBeLessThan(HUGE_BYTES / 2);
      const id = await failureOf(() => httpIdentity(dav).read());
      expect(id.code).toBe('upstream_unreachable');
      expect(id.message).toContain(`over ${BODY_CAPS.small} bytes`);
    } finally {
      await dav.close();
    }
    const doctor = await failureOf(() => readStorageIdObject(`${base}/static/`, upstream));
    expect(doctor.code).toBe('upstream_unreachable');
    expect(doctor.message).toContain(`over ${BODY_CAPS.small} bytes`);
  });

  it('a body under its cap that does not end within the storage timeout is 504 upstream_timeout, its connection closed', async () => {
    const timeoutMs = 2000;
    const client = createS3Client({
      connectTimeoutMs: 5000,
      timeoutMs,
      endpoint: base,
      region: 'us-east-1',
      bucket: 'slow-bucket',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    });
    try {
      const listing = await failureOf(async () => {
        for await (const _ of client.list('slow-listing/')) void _;
      });
      expect(listing.code).toBe('upstream_timeout');
      expect(listing.message).toContain(`within ${timeoutMs} ms`);
      expect(await sentFor('slow-listing')).toBeLessThan(SLOW_BYTES);
      const error = await failureOf(() => client.delete('slow-error-object'));
      expect(error.code).toBe('upstream_timeout');
      expect(await sentFor('slow-error-object')).toBeLessThan(SLOW_BYTES);
    } finally {
      await client.close();
    }
    const doctor = await failureOf(() =>
      readStorageIdObject(`${base}/slow-static/`, { connectTimeoutMs: 5000, timeoutMs }),
    );
    expect(doctor.code).toBe('upstream_timeout');
  });

  it('an error body drained to keep its connection is given up on after the storage timeout, its connection closed', async () => {
    const timeoutMs = 2000;
    const dav = new WebDavClient(`${base}/slow-static/`, { connectTimeoutMs: 5000, timeoutMs });
    try {
      const err = await failureOf(() => dav.remove('gone/some-object'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('answered 503');
      expect(await sentFor('gone/some-object')).toBeLessThan(SLOW_BYTES);
    } finally {
      await dav.close();
    }
  });

  it("a socket PUT's answer not whole within the storage timeout of the last byte is 504 upstream_timeout", async () => {
    const timeoutMs = 2000;
    const { hostname, port } = new URL(base);
    const length = 1000;
    const err = await failureOf(() =>
      putOverSocket(
        { host: hostname, port: Number(port), connectTimeoutMs: 5000, timeoutMs },
        { path: '/slow-put/object', headers: { host: `${hostname}:${port}`, 'content-length': String(length) } },
        (async function* () {
          yield Buffer.alloc(length, 1);
        })(),
        length,
        {},
      ),
    );
    expect(err.code).toBe('upstream_timeout');
    expect(err.message).toContain(`no answer within ${timeoutMs} ms of the last byte`);
    expect(await sentFor('/slow-put/object')).toBeLessThan(SLOW_BYTES);
  });
});
