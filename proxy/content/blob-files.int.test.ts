/**
 * The directory store's blob files as a real gateway serves them when something other than the blob
 * is under its name (planted by a mistake or a hostile co-tenant of the host): a named pipe, a
 * directory, a symbolic link out of the root, a file cut short. None may hang a request or the
 * process, and none may send bytes other than the blob's or pass a short body off as complete.
 */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { mkdir, open, readdir, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';
import { bearer, createRepository, createServiceAccount } from '../../test/support/auth.ts';
import { randomContent, request, sha256 } from '../../test/support/content.ts';
import { useTestDatabase } from '../../test/support/database.ts';
import { makeTempDir, startGateway } from '../../test/support/gateway.ts';

const run = promisify(execFile);
const KiB = 1024;
const MiB = 1024 * KiB;

const blobPath = (root: string, hex: string) =>
  path.join(root, 'blobs', 'sha256', hex.slice(0, 2), hex.slice(2, 4), hex);

/** A GET that gives up after `ms` (so a hang fails the test instead of holding it). */
function getWithin(
  url: string,
  headers: Record<string, string>,
  ms: number,
): Promise<{ status: number; body: Buffer } | 'timed out'> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false, signal: AbortSignal.timeout(ms) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', (err) => (err.name === 'AbortError' ? resolve('timed out') : reject(err)));
  });
}

/** Error lines of the gateway's log that name `text`. */
function errorLinesNaming(logs: string, text: string): string[] {
  return logs.split('\n').filter((line) => line.includes('"level":"error"') && line.includes(text));
}

async function gatewayWithBlobs(db: ReturnType<typeof useTestDatabase>, repo: string, sizes: Record<string, number>) {
  await createRepository(db.pool, repo);
  const { key } = await createServiceAccount(db.pool, { grants: { [repo]: 'write' } });
  const gw = await startGateway({ env: { ARKVORY_DATABASE_URL: db.url } });
  const blobs: Record<string, { bytes: Buffer; file: string; url: string }> = {};
  for (const [id, size] of Object.entries(sizes)) {
    const bytes = randomContent(size);
    const url = `${gw.url}/api/v1/repositories/${repo}/artifacts/${id}`;
    expect((await request(url, { method: 'PUT', headers: bearer(key), body: bytes })).status).toBe(201);
    blobs[id] = { bytes, file: blobPath(gw.dataDir, sha256(bytes)), url: `${url}/content` };
  }
  return { gw, key, blobs };
}

describe('blob files that are not the blob (real gateway)', () => {
  const db = useTestDatabase();

  it('a named pipe in a blob’s place is a prompt 500 naming the blob, logged once per request, and stalls nothing else', async () => {
    // Small ones go through the small-blob cache's fill, large ones straight to the file.
    const { gw, key, blobs } = await gatewayWithBlobs(db, 'fifo', {
      small: 4 * KiB,
      large: MiB + 3,
      fine: MiB + 5,
    });
    const fifos = [blobs.small!, blobs.large!];
    for (const { file } of fifos) {
      await rm(file);
      await run('mkfifo', [file]);
    }
    // Were any open still waiting on a pipe (the old blocking open), a writer's open and close ends it.
    onTestFinished(async () => {
      for (const { file } of fifos) {
        const writer = await open(file, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined);
        await writer?.close();
      }
    });

    // More requests at once than libuv has threads (4): a blocking open of each would hold them all.
    const answers = await Promise.all(
      [0, 1, 2].flatMap(() => fifos.map((blob) => getWithin(blob.url, bearer(key), 4000))),
    );
    for (const answer of answers) {
      expect(answer).not.toBe('timed out');
      if (answer === 'timed out') continue;
      expect(answer.status).toBe(500);
      expect(JSON.parse(answer.body.toString())).toMatchObject({ code: 'internal' });
    }
    // Other requests go on, file operations included.
    const fine = await getWithin(blobs.fine!.url, bearer(key), 4000);
    expect(fine !== 'timed out' && fine.status).toBe(200);
    expect(fine !== 'timed out' && sha256(fine.body)).toBe(sha256(blobs.fine!.bytes));
    // The store's fault, said once per request at the error level, naming the blob and what it is.
    const linesNamingPipes = () =>
      fifos.flatMap((blob) => errorLinesNaming(gw.logs(), sha256(blob.bytes)).map((line) => ({ blob, line })));
    await expect.poll(() => linesNamingPipes().length).toBe(6);
    const lines = linesNamingPipes();
    for (const blob of fifos) expect(lines.filter((l) => l.blob === blob)).toHaveLength(3);
    for (const { line } of lines) expect(line).toContain('is not a regular file');
  }, 30_000);

  it('a directory or a symbolic link out of the root is a 500, never other bytes; a file cut short is a 500 or a cut body, never a complete 200', async () => {
    const { gw, key, blobs } = await gatewayWithBlobs(db, 'odd', {
      dir: MiB + 1,
      link: MiB + 2,
      short: MiB + 3,
      cut: 2 * MiB + 4,
      cutRange: 2 * MiB + 6,
      cutMulti: 2 * MiB + 7,
      cutEmpty: MiB + 8,
      fine: MiB + 5,
    });
    await rm(blobs.dir!.file);
    await mkdir(blobs.dir!.file);
    // A file outside the store, as long as the blob, with other bytes: they must not go out.
    const outside = path.join(await makeTempDir('arkvory-outside-'), 'secret');
    await writeFile(outside, randomContent(blobs.link!.bytes.length));
    await rm(blobs.link!.file);
    await symlink(outside, blobs.link!.file);
    await writeFile(blobs.short!.file, blobs.short!.bytes.subarray(0, MiB));

    for (const id of ['dir', 'link', 'short']) {
      const answer = await getWithin(blobs[id]!.url, bearer(key), 4000);
      expect(answer, id).not.toBe('timed out');
      if (answer === 'timed out') continue;
      expect(answer.status, id).toBe(500);
      expect(JSON.parse(answer.body.toString()), id).toMatchObject({ code: 'internal' });
      await expect.poll(() => errorLinesNaming(gw.logs(), sha256(blobs[id]!.bytes)).length, { message: id }).toBe(1);
    }
    expect(errorLinesNaming(gw.logs(), sha256(blobs.link!.bytes)).join('\n')).toContain('symbolic link');

    // Cut short after its descriptor was cached (same file, so nothing says it changed): the head is
    // out before the end is found, so the body is cut, which curl reports as a partial transfer; a
    // read that finds the end before any body byte went out is a 500. Either is logged naming the
    // blob, and the descriptor is dropped: the next request opens the file afresh and gets a clean 500.
    const curl = async (args: string[]) => {
      const result = await run('curl', ['-sS', '-o', '-', '-w', '\n%{http_code} %{size_download}', ...args], {
        encoding: 'buffer',
        maxBuffer: 8 * MiB,
      }).then(
        ({ stdout }) => ({ code: 0, stdout }),
        (err: { code: number; stdout: Buffer }) => ({ code: err.code, stdout: err.stdout }),
      );
      const text = result.stdout.toString('latin1');
      const [status, bytes] = text.slice(text.lastIndexOf('\n') + 1).split(' ');
      return {
        exit: result.code,
        status: Number(status),
        bytes: Number(bytes),
        body: text.slice(0, text.lastIndexOf('\n')),
      };
    };
    const auth = ['-H', `authorization: Bearer ${key}`];
    const cutIds = ['cut', 'cutRange', 'cutMulti', 'cutEmpty'];
    for (const id of cutIds)
      expect(await curl([...auth, blobs[id]!.url]), id).toMatchObject({
        exit: 0,
        status: 200,
        bytes: blobs[id]!.bytes.length,
      });
    for (const id of cutIds) await truncate(blobs[id]!.file, id === 'cutEmpty' ? 0 : MiB);
    expect(await curl([...auth, blobs.cut!.url])).toMatchObject({ exit: 18, status: 200, bytes: MiB });
    // Nothing of the answer is out before its first body byte is read: a first read that finds the
    // end is a clean 500, not an empty reply (a range past the cut, multipart too, or a whole file
    // cut to nothing).
    const first = [
      await curl([...auth, '-H', `range: bytes=${MiB + 10}-${MiB + 20}`, blobs.cutRange!.url]),
      await curl([...auth, '-H', `range: bytes=${MiB + 10}-${MiB + 20},${MiB + 30}-${MiB + 40}`, blobs.cutMulti!.url]),
      await curl([...auth, blobs.cutEmpty!.url]),
    ];
    for (const answer of first) {
      expect(answer).toMatchObject({ exit: 0, status: 500 });
      expect(JSON.parse(answer.body)).toMatchObject({ code: 'internal' });
    }
    for (const id of cutIds) {
      await expect.poll(() => errorLinesNaming(gw.logs(), sha256(blobs[id]!.bytes)), { message: id }).toHaveLength(1);
      const cutLines = errorLinesNaming(gw.logs(), sha256(blobs[id]!.bytes));
      expect(cutLines[0], id).toContain('ended at byte');
      const again = await curl([...auth, blobs[id]!.url]);
      expect(again, id).toMatchObject({ exit: 0, status: 500 });
      expect(JSON.parse(again.body), id).toMatchObject({ code: 'internal' });
    }

    // The gateway goes on serving.
    const fine = await curl([...auth, blobs.fine!.url]);
    expect(fine).toMatchObject({ exit: 0, status: 200, bytes: blobs.fine!.bytes.length });
    expect(sha256(Buffer.from(fine.body, 'latin1'))).toBe(sha256(blobs.fine!.bytes));
  }, 30_000);

  it('a shard directory replaced by a symbolic link out of the root is a 500, never the bytes behind it', async () => {
    // Large: the small-blob cache would refuse other bytes by their digest anyway; this reads the file.
    const { gw, key, blobs } = await gatewayWithBlobs(db, 'shard', { linked: MiB + 9, fine: MiB + 5 });
    const { file, bytes } = blobs.linked!;
    const shard = path.dirname(file);
    // Another directory of the host, with a file of the blob's name and length but other bytes.
    const outside = await makeTempDir('arkvory-outside-shard-');
    await writeFile(path.join(outside, path.basename(file)), randomContent(bytes.length));
    await rm(shard, { recursive: true });
    await symlink(outside, shard);

    for (const range of [undefined, 'bytes=0-99']) {
      const answer = await getWithin(blobs.linked!.url, { ...bearer(key), ...(range && { range }) }, 4000);
      expect(answer, range).not.toBe('timed out');
      if (answer === 'timed out') continue;
      expect(answer.status, range).toBe(500);
      expect(JSON.parse(answer.body.toString()), range).toMatchObject({ code: 'internal' });
    }
    await expect.poll(() => errorLinesNaming(gw.logs(), sha256(bytes)).length).toBe(2);
    expect(errorLinesNaming(gw.logs(), sha256(bytes)).join('\n')).toContain('leads out of its place in the store');
    const fine = await getWithin(blobs.fine!.url, bearer(key), 4000);
    expect(fine !== 'timed out' && sha256(fine.body)).toBe(sha256(blobs.fine!.bytes));
  }, 30_000);

  it('an upload whose shard directory is a symbolic link out of the root is refused: nothing written there, nothing published', async () => {
    const { gw, key } = await gatewayWithBlobs(db, 'shardput', {});
    const bytes = randomContent(64 * KiB + 3);
    const shard = path.dirname(blobPath(gw.dataDir, sha256(bytes)));
    const outside = await makeTempDir('arkvory-outside-put-');
    await mkdir(path.dirname(shard), { recursive: true });
    await symlink(outside, shard);
    const url = `${gw.url}/api/v1/repositories/shardput/artifacts/a`;

    const put = await request(url, { method: 'PUT', headers: bearer(key), body: bytes });
    expect(put.status).toBe(500);
    expect(await readdir(outside)).toEqual([]);
    expect((await request(`${url}/content`, { headers: bearer(key) })).status).toBe(404);
    await expect.poll(() => errorLinesNaming(gw.logs(), 'leads out of its place in the store').length).toBe(1);
  }, 30_000);
});
