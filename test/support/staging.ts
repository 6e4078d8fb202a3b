/**
 * What the staging tests share: the remote stores a killed process's staged upload is looked for on
 * (the static-HTTP store on real nginx, S3 on real MinIO), and a lock on the catalog that holds a
 * publish between its staging and its commit.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { listKeys, type S3Server } from './s3-server.ts';
import { sharedS3Bucket } from './shared-s3.ts';
import { startStaticStore, type StaticStore } from './static-store.ts';
import { stagedUploads } from './worker-instance.ts';

export interface StagingBacking {
  env: Record<string, string>;
  /** Every staged upload on the store, at any depth under tmp/. */
  staged(): Promise<string[]>;
  /** Puts a staged upload at `tmp/<dir>/<name>.upload` behind the gateway's back (what a killed process left). */
  leave(dir: string, name: string): Promise<void>;
  /** Object stores: begins a multipart upload of `tmp/<dir>/<name>.upload` that is never completed. */
  beginUpload?(dir: string, name: string): Promise<void>;
  /** Object stores: the keys of the multipart uploads begun and neither completed nor aborted. */
  openUploads?(): Promise<string[]>;
  stop(): Promise<void>;
}

export const STAGING_BACKINGS: Record<'static-HTTP' | 'S3 (minio)', () => Promise<StagingBacking>> = {
  'static-HTTP': async () => {
    const store: StaticStore = await startStaticStore();
    return {
      env: { ARKVORY_STORAGE_URL: store.url },
      staged: () => stagedUploads(store.root),
      async leave(dir, name) {
        await mkdir(path.join(store.root, 'tmp', dir), { recursive: true });
        await writeFile(path.join(store.root, 'tmp', dir, `${name}.upload`), 'left by a killed process');
      },
      stop: () => store.stop(),
    };
  },
  'S3 (minio)': async () => {
    const server: S3Server = await sharedS3Bucket('minio');
    return {
      env: server.env(),
      staged: () => listKeys(server, 'tmp/'),
      async leave(dir, name) {
        const res = await server
          .client()
          .request({ method: 'PUT', key: `tmp/${dir}/${name}.upload`, body: Buffer.from('left by a killed process') });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new Error(`PUT of a staged upload: ${res.statusCode} ${text}`);
      },
      async beginUpload(dir, name) {
        const res = await server
          .client()
          .request({ method: 'POST', key: `tmp/${dir}/${name}.upload`, query: { uploads: '' } });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new Error(`a multipart upload's start: ${res.statusCode} ${text}`);
      },
      async openUploads() {
        const keys: string[] = [];
        for await (const u of server.client().listMultipartUploads('')) keys.push(u.key);
        return keys.sort();
      },
      stop: () => server.destroy(),
    };
  },
};

/**
 * Holds every publish once its bytes are staged: a publish looks its name up in the catalog then,
 * and waits on this lock until `release` (which may be called again, in a `finally`).
 */
export async function holdPublishes(pool: pg.Pool): Promise<{ release(): Promise<void> }> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('LOCK TABLE arkvory_artifacts IN ACCESS EXCLUSIVE MODE');
  } catch (err) {
    client.release(true);
    throw err;
  }
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      try {
        await client.query('ROLLBACK');
      } finally {
        client.release();
      }
    },
  };
}
