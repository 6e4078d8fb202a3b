/**
 * What only the static-HTTP store does: its refusals name ARKVORY_STORAGE_URL, a store that is
 * down (nginx stopped) refuses with `upstream_unreachable`, and a store without MOVE still puts the
 * verified bytes in place of damaged ones under the blob name. Everything every store must do, this one
 * included, is the conformance suite (test/conformance/artifact-store.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, rename, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import { freeLoopbackPort, startProcess, waitForHttp, writeNginxConf } from '../../test/harness/index.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir } from '../../test/support/gateway.ts';
import { startRewritingFront, startStaticStore } from '../../test/support/static-store.ts';
import { openHttpStore } from './http-store.ts';
import { blobRelativePath } from '../paths.ts';
import { scrubBlobs } from '../maintenance/scrub.ts';
import type { StoreTree } from '../store.ts';

describe('static-HTTP store (nginx)', () => {
  const db = useTestDatabase();
  /** The writer of the store at `url`, on a database that names no store yet. */
  const freshWriterStore = async (url: string, timeoutMs = 5000) => {
    await db.pool.query('DELETE FROM arkvory_storage');
    return openHttpStore({ url, role: 'writer', pool: db.pool, connectTimeoutMs: 1000, timeoutMs });
  };

  it('refusals name ARKVORY_STORAGE_URL; a store that is down refuses as unreachable', async () => {
    const nginx = await startStaticStore();
    try {
      await db.pool.query('DELETE FROM arkvory_storage');
      const open = (role: 'writer' | 'reader', url = nginx.url) =>
        openHttpStore({ url, role, pool: db.pool, connectTimeoutMs: 1000, timeoutMs: 5000 });
      const writer = await open('writer');
      expect(writer.identity.variable).toBe('ARKVORY_STORAGE_URL');
      await writer.close();
      // Another, empty store on the same database: refused, naming the variable to fix.
      await expect(open('writer', `${nginx.url}other/`)).rejects.toMatchObject({
        code: 'storage_mismatch',
        message: expect.stringContaining('ARKVORY_STORAGE_URL'),
      });
      expect(await readdir(nginx.root)).toEqual(['storage-id']);

      await nginx.stop();
      await expect(open('reader')).rejects.toMatchObject({ code: 'upstream_unreachable' });
    } finally {
      await nginx.stop();
    }
  });

  it('without MOVE (the GET+PUT fallback), a damaged file under the blob name is replaced by the verified bytes', async () => {
    const nginx = await startStaticStore({ move: false });
    try {
      const store = await freshWriterStore(nginx.url);
      try {
        const bytes = randomBytes(70_000);
        const hex = createHash('sha256').update(bytes).digest('hex');
        const file = path.join(nginx.root, blobRelativePath(hex));
        await mkdir(path.dirname(file), { recursive: true });
        // Other bytes of the same size: damaged on the storage host.
        await writeFile(file, randomBytes(bytes.length));
        const staged = await store.stage(Readable.from([bytes]), { maxBytes: 1e6 });
        await staged.commit();
        await staged.discard();
        expect(
          createHash('sha256')
            .update(await readFile(file))
            .digest('hex'),
        ).toBe(hex);
        expect(await readdir(path.join(nginx.root, 'tmp'))).toEqual([]);
      } finally {
        await store.close();
      }
    } finally {
      await nginx.stop();
    }
  });

  it('without MOVE, a copy whose GET comes back other bytes (a proxy rewriting it, or cutting it short with a clean end) publishes nothing: stored_bytes_mismatch', async () => {
    const nginx = await startStaticStore({ move: false });
    // A second nginx in front of the store rewrites what it answers GETs under tmp/ with (as a
    // rewriting proxy would): one marker into other bytes of its length, another into nothing.
    const same = 'ARKVORY-SAME-SIZE-MARKER';
    const cut = 'ARKVORY-CUT-SHORT-MARKER';
    try {
      const front = await startRewritingFront(nginx, 'tmp/', [
        [same, 'x'.repeat(same.length)],
        [cut, ''],
      ]);
      onTestFinished(() => front.stop());
      const store = await freshWriterStore(front.url);
      try {
        for (const [marker, size] of [
          [same, 'the same size'],
          [cut, 'fewer bytes'],
        ] as const) {
          const bytes = Buffer.concat([randomBytes(40_000), Buffer.from(marker), randomBytes(40_000)]);
          const hex = createHash('sha256').update(bytes).digest('hex');
          const staged = await store.stage(Readable.from([bytes]), { maxBytes: 1e6 });
          try {
            await expect(staged.commit(), size).rejects.toMatchObject({
              code: 'stored_bytes_mismatch',
              message: expect.stringContaining(hex),
            });
          } finally {
            await staged.discard();
          }
          // Nothing under the blob name, whole or partial; the temporary gone with the discard.
          expect(await readdir(path.join(nginx.root, 'blobs')).catch(() => []), size).toEqual([]);
          expect(await readdir(path.join(nginx.root, 'tmp')), size).toEqual([]);
        }
      } finally {
        await store.close();
      }
    } finally {
      await nginx.stop();
    }
  });

  it('without MOVE, scrub quarantines the bytes it judged; a file put back between its read and its copy stays under its name, unjudged (stored_bytes_mismatch)', async () => {
    const nginx = await startStaticStore({ move: false });
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    try {
      const store = await freshWriterStore(nginx.url);
      try {
        const bytes = randomBytes(70_000);
        const damaged = Buffer.from(bytes);
        damaged[100]! ^= 1;
        const name = blobRelativePath(sha(bytes));
        const file = path.join(nginx.root, name);
        await mkdir(path.dirname(file), { recursive: true });
        const quarantined = async () => readdir(path.join(nginx.root, 'quarantine')).catch(() => []);

        // The blob's bytes put back on the storage host (from a backup) once scrub has read the
        // damaged file, before its copy to quarantine/ reads it again.
        await writeFile(file, damaged);
        const tree: StoreTree = {
          ...store.tree,
          async *read(file) {
            yield* store.tree.read(file);
            if (file === name) await writeFile(path.join(nginx.root, name), bytes);
          },
        };
        const changed = await scrubBlobs(tree, { nowMs: () => 1 });
        expect(changed.corrupt).toEqual([]);
        expect(changed.unjudged).toEqual([
          { blob: sha(bytes), code: 'stored_bytes_mismatch', message: expect.stringContaining(sha(damaged)) },
        ]);
        expect(sha(await readFile(file))).toBe(sha(bytes));
        expect(await quarantined()).toEqual([]);

        // Nothing changing meanwhile: the damaged bytes are quarantined as read, and reported so.
        await writeFile(file, damaged);
        const report = await scrubBlobs(store.tree, { nowMs: () => 2 });
        expect(report.corrupt).toEqual([
          { blob: sha(bytes), actualSha256: sha(damaged), quarantinedAs: `quarantine/${sha(bytes)}.2` },
        ]);
        expect(sha(await readFile(path.join(nginx.root, 'quarantine', `${sha(bytes)}.2`)))).toBe(sha(damaged));
        expect(await readdir(path.dirname(file))).toEqual([]);
      } finally {
        await store.close();
      }
    } finally {
      await nginx.stop();
    }
  });

  it('scrub through a proxy that answers a blob short or long with a clean end leaves it unjudged (read_incomplete), never quarantined; a read whole on the second try is judged', async () => {
    const nginx = await startStaticStore();
    // A second nginx in front of the store rewrites the blobs it answers (sub_filter, chunked with a
    // clean end): one marker into nothing (cut short), another into more bytes (running long).
    const cut = 'ARKVORY-CUT-SHORT-MARKER';
    const long = 'ARKVORY-RUNS-LONG-MARKER';
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    try {
      const front = await startRewritingFront(nginx, 'blobs/', [
        [cut, ''],
        [long, long + long],
      ]);
      onTestFinished(() => front.stop());
      const direct = await freshWriterStore(nginx.url);
      const proxied = await openHttpStore({
        url: front.url,
        role: 'reader',
        pool: db.pool,
        connectTimeoutMs: 1000,
        timeoutMs: 5000,
      });
      try {
        const healthy = [cut, long].map((marker) =>
          Buffer.concat([randomBytes(30_000), Buffer.from(marker), randomBytes(30_000)]),
        );
        for (const bytes of healthy) {
          const file = path.join(nginx.root, blobRelativePath(sha(bytes)));
          await mkdir(path.dirname(file), { recursive: true });
          await writeFile(file, bytes);
        }
        const report = await scrubBlobs(proxied.tree, { nowMs: () => 1 });
        expect(report.corrupt).toEqual([]);
        expect(report.checked).toBe(0);
        expect(report.unjudged.map((u) => [u.blob, u.code]).sort()).toEqual(
          healthy.map((b) => [sha(b), 'read_incomplete']).sort(),
        );
        expect(await readdir(nginx.root)).not.toContain('quarantine');
        for (const bytes of healthy)
          expect(sha(await readFile(path.join(nginx.root, blobRelativePath(sha(bytes)))))).toBe(sha(bytes));

        // Cut short once only (the proxy, then the store itself): judged on the second read, healthy.
        const reads = new Map<string, number>();
        const onceCut: StoreTree = {
          ...direct.tree,
          read(file, head) {
            reads.set(file, (reads.get(file) ?? 0) + 1);
            return (reads.get(file) === 1 ? proxied.tree : direct.tree).read(file, head);
          },
        };
        const again = await scrubBlobs(onceCut, { nowMs: () => 2 });
        expect(again).toMatchObject({ checked: 2, corrupt: [], unjudged: [] });
        expect([...reads.values()]).toEqual([2, 2]);
      } finally {
        await proxied.close();
        await direct.close();
      }
    } finally {
      await nginx.stop();
    }
  });

  it('a store that answers an upload before it had the whole body (nginx `return 201`) is a failure, never a staged blob', async () => {
    const nginx = await startStaticStore();
    // A second nginx in front of the store answers every PUT under tmp/ at once, reading nothing;
    // everything else goes through to the store.
    const dir = await makeTempDir('arkvory-early-answer-');
    const port = await freeLoopbackPort();
    const upstream = `http://127.0.0.1:${nginx.port}`;
    const conf = await writeNginxConf(dir, {
      http: `server {
  listen 127.0.0.1:${port};
  location /arkvory/tmp/ { if ($request_method = PUT) { return 201; } proxy_pass ${upstream}; }
  location / { proxy_pass ${upstream}; }
}`,
    });
    const front = startProcess('/usr/sbin/nginx', ['-p', dir, '-c', conf], { name: 'nginx (answers early)' });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/arkvory/`, { process: front, isReady: (status) => status < 500 });
      const store = await freshWriterStore(`http://127.0.0.1:${port}/arkvory/`);
      let closed = false;
      async function* body(): AsyncGenerator<Buffer> {
        try {
          yield Buffer.alloc(64 * 1024, 1);
          await sleep(500);
          yield Buffer.alloc(64 * 1024, 2);
        } finally {
          closed = true;
        }
      }
      try {
        await expect(store.stage(body(), { maxBytes: 1024 * 1024, expectedLength: 128 * 1024 })).rejects.toMatchObject({
          code: 'upstream_unreachable',
          message: expect.stringContaining('before it had received the whole body'),
        });
        await expect.poll(() => closed, { timeout: 2000 }).toBe(true);
        expect(await readdir(nginx.root)).toEqual(['storage-id']);
      } finally {
        await store.close();
      }
    } finally {
      await front.stop();
      await nginx.stop();
    }
  });

  it('a blob replaced on the store between two ranges of one read is upstream_unreachable, never the other bytes', async () => {
    const nginx = await startStaticStore();
    try {
      const store = await freshWriterStore(nginx.url);
      try {
        const bytes = randomBytes(300_000);
        const hex = createHash('sha256').update(bytes).digest('hex');
        const staged = await store.stage(Readable.from([bytes]), { maxBytes: 1e6 });
        await staged.commit();
        const file = path.join(nginx.root, blobRelativePath(hex));
        const ranges = [
          { start: 0, end: 99 },
          { start: 200_000, end: 200_099 },
        ];
        const readRange = async (reader: Awaited<ReturnType<typeof store.openBlob>>, index: number) => {
          const got: Buffer[] = [];
          for await (const chunk of reader.chunks!(ranges[index]!, new AbortController().signal)) got.push(chunk);
          return Buffer.concat(got);
        };
        // Replaced on the storage host (renamed over, as a restore or a hand copy would) by other
        // bytes: of another size, then of the same size (nginx's ETag is its mtime and size).
        for (const size of [400_000, bytes.length]) {
          for (const opened of [() => store.openBlob(hex, ranges), () => store.openBlob(hex)]) {
            await writeFile(file, bytes);
            const reader = await opened();
            try {
              expect(await readRange(reader, 0)).toEqual(bytes.subarray(0, 100));
              const other = `${file}.other`;
              await writeFile(other, randomBytes(size));
              const later = new Date(Date.now() + 60_000);
              await utimes(other, later, later);
              await rename(other, file);
              await expect(readRange(reader, 1)).rejects.toMatchObject({
                code: 'upstream_unreachable',
                message: expect.stringContaining('changed'),
              });
            } finally {
              await reader.close();
            }
          }
        }
      } finally {
        await store.close();
      }
    } finally {
      await nginx.stop();
    }
  });

  it('an upload to a store that accepts it and then takes no byte for the storage timeout fails upstream_timeout', async () => {
    const nginx = await startStaticStore();
    try {
      const timeoutMs = 1000;
      const store = await freshWriterStore(nginx.url, timeoutMs);
      let closed = false;
      const chunk = Buffer.alloc(1024 * 1024, 7);
      // Far more than the socket buffers between the gateway and the store hold.
      async function* body(): AsyncGenerator<Buffer> {
        try {
          for (let i = 0; i < 256; i++) yield chunk;
        } finally {
          closed = true;
        }
      }
      try {
        // Connected and its PUT begun, then the store hangs with its sockets open.
        const staging = store.stage(
          (async function* () {
            let first = true;
            for await (const c of body()) {
              yield c;
              if (first) await nginx.freeze();
              first = false;
            }
          })(),
          { maxBytes: 1024 ** 3 },
        );
        const bound = new Promise((resolve) => setTimeout(resolve, 30 * timeoutMs, 'still waiting'));
        await expect(Promise.race([staging, bound])).rejects.toMatchObject({ code: 'upstream_timeout' });
        await expect.poll(() => closed, { timeout: 5000 }).toBe(true);
      } finally {
        await nginx.thaw();
        await store.close();
      }
    } finally {
      await nginx.stop();
    }
  });
});
