/**
 * The static-HTTP store reads answers whole only under their caps and within the storage timeout,
 * against a real nginx answering as a broken store would (test/support/misbehaving-store.ts): a JSON
 * listing or `storage-id` of 64 MiB is 502 `upstream_unreachable` naming the cap, a trickled
 * `storage-id` 504 `upstream_timeout`, and an error page drained to keep its connection is given up
 * on after the timeout; each connection is closed at once (nginx ends the request well short of the body).
 */
import { describe, expect, it } from 'vitest';
import { HUGE_BYTES, SLOW_BYTES, storageFailureOf, useMisbehavingStore } from '../../test/support/misbehaving-store.ts';
import { BODY_CAPS } from '../streaming/bounded-body.ts';
import { readStorageIdObject } from './http-store.ts';
import { httpIdentity, httpTree } from './http-tree.ts';
import { WebDavClient } from './http-webdav.ts';

const store = useMisbehavingStore();
const upstream = { connectTimeoutMs: 5000, timeoutMs: 30_000 };

describe('static store answers read whole (real nginx answering 64 MiB, or trickling)', () => {
  it('the JSON listing and storage-id past their caps are 502 upstream_unreachable, their connections closed', async () => {
    const dav = new WebDavClient(`${store.base}/static/`, upstream);
    try {
      const listing = await storageFailureOf(() => httpTree(dav).list('tmp'));
      expect(listing.code).toBe('upstream_unreachable');
      expect(listing.message).toContain(`over ${BODY_CAPS.autoindex} bytes`);
      expect(await store.sentFor('/static/tmp/')).toBeLessThan(HUGE_BYTES / 2);
      const id = await storageFailureOf(() => httpIdentity(dav).read());
      expect(id.code).toBe('upstream_unreachable');
      expect(id.message).toContain(`over ${BODY_CAPS.small} bytes`);
    } finally {
      await dav.close();
    }
    const doctor = await storageFailureOf(() => readStorageIdObject(`${store.base}/static/`, upstream));
    expect(doctor.code).toBe('upstream_unreachable');
    expect(doctor.message).toContain(`over ${BODY_CAPS.small} bytes`);
  });

  it('a storage-id that does not end within the storage timeout is 504 upstream_timeout', async () => {
    const doctor = await storageFailureOf(() =>
      readStorageIdObject(`${store.base}/slow-static/`, { connectTimeoutMs: 5000, timeoutMs: 2000 }),
    );
    expect(doctor.code).toBe('upstream_timeout');
    expect(doctor.message).toContain('within 2000 ms');
  });

  it('an error body drained to keep its connection is given up on after the storage timeout, its connection closed', async () => {
    const dav = new WebDavClient(`${store.base}/slow-static/`, { connectTimeoutMs: 5000, timeoutMs: 2000 });
    try {
      const err = await storageFailureOf(() => dav.remove('gone/some-object'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('answered 503');
      expect(await store.sentFor('gone/some-object')).toBeLessThan(SLOW_BYTES);
    } finally {
      await dav.close();
    }
  });
});

describe('static store listings of a broken or hostile server (real nginx answering them)', () => {
  it('a JSON listing naming `..` is 502 upstream_unreachable: gc never deletes `tmp/..`, the store root to nginx', async () => {
    const dav = new WebDavClient(`${store.base}/dotdot-static/`, upstream);
    try {
      const err = await storageFailureOf(() => httpTree(dav).list('tmp'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('not a plain name ("..")');
    } finally {
      await dav.close();
    }
  });

  it('a JSON listing whose entries have no name is 502 upstream_unreachable, not entries named "undefined"', async () => {
    const dav = new WebDavClient(`${store.base}/noname-static/`, upstream);
    try {
      const err = await storageFailureOf(() => httpTree(dav).list('tmp'));
      expect(err.code).toBe('upstream_unreachable');
      expect(err.message).toContain('not a plain name ("")');
    } finally {
      await dav.close();
    }
  });
});
