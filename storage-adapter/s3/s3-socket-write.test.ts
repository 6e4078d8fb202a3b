/**
 * The S3 store's socket PUTs: reading the answer (pure), and what a real S3 server never does but a
 * broken link or server can (a listener that takes no byte, a success before the whole body, a
 * connection closed without an answer), over loopback sockets. The paths against real servers run
 * in s3-store.int.test.ts.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { completeAnswer, dechunk, putOverSocket } from './s3-socket-write.ts';

const text = (s: string) => Buffer.from(s.replace(/\n/g, '\r\n'));

describe('completeAnswer', () => {
  it('waits for the whole answer by Content-Length, then returns status, headers and body text', () => {
    const full = text('HTTP/1.1 403 Forbidden\nContent-Length: 7\n\n<Error>');
    expect(completeAnswer(full.subarray(0, full.length - 2), 'PUT /b/k', false)).toBeUndefined();
    const answer = completeAnswer(full, 'PUT /b/k', false)!;
    expect(answer.status).toBe(403);
    expect(answer.headers.get('content-length')).toBe('7');
    expect(answer.text).toBe('<Error>');
  });
  it('skips 100 Continue, decodes a chunked body, and takes what came when the connection closed', () => {
    expect(completeAnswer(text('HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\nContent-Length: 0\n\n'), 'x', false)).toEqual(
      expect.objectContaining({ status: 200, text: '' }),
    );
    const chunked = text('HTTP/1.1 500 Internal\nTransfer-Encoding: chunked\n\n3\n<Er\n4\nror>\n0\n\n');
    expect(completeAnswer(chunked, 'x', false)?.text).toBe('<Error>');
    expect(completeAnswer(text('HTTP/1.1 500 Internal\nTransfer-Encoding: chunked\n\n3\n<Er\n'), 'x', false)).toBe(
      undefined,
    );
    expect(completeAnswer(text('HTTP/1.1 502 Bad\n\npartial'), 'x', false)).toBeUndefined();
    expect(completeAnswer(text('HTTP/1.1 502 Bad\n\npartial'), 'x', true)?.text).toBe('partial');
  });
  it('refuses an answer that is not HTTP/1.x', () => {
    expect(() => completeAnswer(text('SSH-2.0-x\n\n'), 'PUT /b/k', false)).toThrow(/not HTTP\/1.x/);
  });
});

describe('dechunk', () => {
  it('joins the chunks up to the last one, undefined while incomplete, and refuses a bad size', () => {
    expect(dechunk(text('2;ext=1\nab\n1\nc\n0\n\n'))?.toString()).toBe('abc');
    expect(dechunk(text('2\nab\n'))).toBeUndefined();
    expect(() => dechunk(text('zz\nab\n'))).toThrow(/chunk size/);
  });
});

describe('putOverSocket against a misbehaving listener', () => {
  const servers: net.Server[] = [];
  const connections: net.Socket[] = [];
  afterEach(async () => {
    for (const c of connections.splice(0)) c.destroy();
    for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  });
  /** A loopback listener whose connections `onConnection` handles; its port. */
  async function listen(onConnection: (socket: net.Socket) => void): Promise<number> {
    const server = net.createServer((socket) => {
      connections.push(socket);
      onConnection(socket);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return (server.address() as net.AddressInfo).port;
  }
  const request = { path: '/b/k', headers: { host: 'x', 'content-length': '0' } };
  async function* bytes(n: number) {
    for (let i = 0; i < n; i += 64 * 1024) yield Buffer.alloc(Math.min(64 * 1024, n - i), 1);
  }

  it('a body above 256 KiB waits for 100 Continue; the server gets the head alone first, then every byte', async () => {
    const size = 3 * 1024 * 1024 + 7;
    let beforeContinue = '';
    let bodyBytes = 0;
    const port = await listen((s) => {
      let head = Buffer.alloc(0);
      const onHead = (d: Buffer) => {
        head = Buffer.concat([head, d]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        s.off('data', onHead);
        beforeContinue = head.toString('latin1');
        s.on('data', (b: Buffer) => {
          bodyBytes += b.length;
          if (bodyBytes === size) s.end('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
        });
        // A moment of silence first: nothing of the body may come before the 100.
        setTimeout(() => s.write('HTTP/1.1 100 Continue\r\n\r\n'), 100);
      };
      s.on('data', onHead);
    });
    const answer = await putOverSocket(
      { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 5000 },
      { path: '/b/k', headers: { host: 'x', 'content-length': String(size) } },
      bytes(size),
      size,
      {},
    );
    expect(answer.status).toBe(200);
    expect(beforeContinue).toMatch(/expect: 100-continue\r\n/);
    expect(beforeContinue.endsWith('\r\n\r\n')).toBe(true);
    expect(bodyBytes).toBe(size);
  });

  it('a server that takes no byte for the timeout ends as upstream_timeout', async () => {
    const port = await listen((s) => s.pause());
    const started = Date.now();
    await expect(
      putOverSocket(
        { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 300 },
        request,
        bytes(64 * 1024 * 1024),
        64 * 1024 * 1024,
        {},
      ),
    ).rejects.toMatchObject({ code: 'upstream_timeout', message: expect.stringMatching(/took no byte for 300 ms/) });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('a server that does not answer after the last byte ends as upstream_timeout', async () => {
    const port = await listen((s) => s.resume());
    await expect(
      putOverSocket(
        { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 300 },
        request,
        bytes(1000),
        1000,
        {},
      ),
    ).rejects.toMatchObject({ code: 'upstream_timeout', message: expect.stringMatching(/no answer within 300 ms/) });
  });

  it('a success before the whole body is never taken as stored; a close without an answer is upstream_unreachable', async () => {
    const early = await listen((s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'));
    await expect(
      putOverSocket(
        { host: '127.0.0.1', port: early, connectTimeoutMs: 2000, timeoutMs: 5000 },
        request,
        bytes(8 * 1024 * 1024),
        8 * 1024 * 1024,
        {},
      ),
    ).rejects.toMatchObject({
      code: 'upstream_unreachable',
      message: expect.stringMatching(/before it had the whole body/),
    });
    const closing = await listen((s) => s.once('data', () => s.destroy()));
    await expect(
      putOverSocket(
        { host: '127.0.0.1', port: closing, connectTimeoutMs: 2000, timeoutMs: 5000 },
        request,
        bytes(1000),
        1000,
        {},
      ),
    ).rejects.toMatchObject({ code: 'upstream_unreachable' });
  });

  it('a body longer or shorter than its Content-Length is refused and its last bytes never sent', async () => {
    let got = 0;
    const port = await listen((s) => s.on('data', (d: Buffer) => (got += d.length)));
    const options = { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 5000 };
    const head = { path: '/b/k', headers: { host: 'x', 'content-length': '1000' } };
    await expect(putOverSocket(options, head, bytes(1001), 1000, {})).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringMatching(/longer than its Content-Length/),
    });
    await expect(putOverSocket(options, head, bytes(999), 1000, {})).rejects.toMatchObject({
      code: 'invalid_request',
      message: expect.stringMatching(/999 bytes but Content-Length said 1000/),
    });
    await new Promise((r) => setTimeout(r, 100));
    // Only the two heads arrived: no body byte of either.
    expect(got).toBeLessThan(200);
  });

  it('an empty body is read to its end before the head (the whole request) goes; a body failing its checks sends nothing', async () => {
    let connections = 0;
    let headAt = 0;
    const port = await listen((s) => {
      connections++;
      s.once('data', () => {
        headAt = Date.now();
        s.end('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
      });
    });
    const options = { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 5000 };
    let endedAt = 0;
    async function* late(fail: boolean) {
      await new Promise((r) => setTimeout(r, 200));
      yield Buffer.alloc(0);
      endedAt = Date.now();
      if (fail) throw Object.assign(new Error('digest mismatch'), { code: 'invalid_request' });
    }
    await expect(putOverSocket(options, request, late(true), 0, {})).rejects.toThrow('digest mismatch');
    await new Promise((r) => setTimeout(r, 50));
    expect(connections).toBe(0);
    expect((await putOverSocket(options, request, late(false), 0, {})).status).toBe(200);
    expect(headAt).toBeGreaterThanOrEqual(endedAt);
    await expect(putOverSocket(options, request, bytes(1), 0, {})).rejects.toMatchObject({ code: 'invalid_request' });
    expect(connections).toBe(1);
  });

  it('the caller’s abort wins and ends the upload at once', async () => {
    const port = await listen((s) => s.resume());
    const controller = new AbortController();
    async function* endless() {
      for (;;) {
        yield Buffer.alloc(64 * 1024);
        await new Promise((r) => setTimeout(r, 1));
      }
    }
    setTimeout(() => controller.abort(new Error('client left')), 50);
    await expect(
      putOverSocket(
        { host: '127.0.0.1', port, connectTimeoutMs: 2000, timeoutMs: 5000 },
        request,
        endless(),
        1024 * 1024 * 1024,
        { signal: controller.signal },
      ),
    ).rejects.toThrow('client left');
  });
});
