import net from 'node:net';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FrontDoorServer, startFrontDoorServer } from '../../../test/support/front-door-server.ts';

let listening: FrontDoorServer;
let port: number;
const early: string[] = [];
/** Resolved by the test's slow answer when it has written its head and first half. */
let halfSent: (() => void) | undefined;
/** What the slow answer waits for before its second half. */
let finishSlow: (() => void) | undefined;

beforeAll(async () => {
  listening = await startFrontDoorServer({
    answeredEarly: (code) => early.push(code),
    answer: (req, res) => {
      if (req.url !== '/slow') {
        res.end('ok');
        return;
      }
      res.writeHead(200, { 'content-length': '8' });
      res.write('AAAA');
      finishSlow = () => res.end('BBBB');
      halfSent?.();
    },
  });
  port = listening.port;
});

afterAll(() => listening.close());

/** Sends `head` raw and returns everything the server wrote before it closed the connection. */
function exchange(head: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(port, '127.0.0.1', () => socket.write(head));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
  });
}

describe('client errors at the front door', () => {
  it('a malformed request line gets 400 invalid_request with x-request-id, and the connection closes', async () => {
    const text = await exchange(Buffer.from('NOT A REQUEST\r\n\r\n'));
    expect(text).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(text).toMatch(/\r\nx-request-id: [0-9a-f-]{36}\r\n/);
    expect(text).toContain('connection: close');
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toEqual({
      code: 'invalid_request',
      message: 'Malformed HTTP request.',
    });
  });

  it('a control byte inside Authorization gets the 401 any bad key gets, with WWW-Authenticate', async () => {
    const text = await exchange(
      Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n', 'latin1'),
    );
    expect(text).toMatch(/^HTTP\/1\.1 401 Unauthorized\r\n/);
    expect(text).toContain('www-authenticate: Bearer realm="arkvory"\r\n');
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)).code).toBe('unauthorized');
  });

  it('each answer given before a request existed is heard by its code (the gateway counts them as client faults)', async () => {
    early.length = 0;
    await exchange(Buffer.from('NOT A REQUEST\r\n\r\n'));
    await exchange(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n', 'latin1'));
    const unmet = await exchange(
      Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nConnection: close\r\n\r\n'),
    );
    expect(unmet).toMatch(/^HTTP\/1\.1 417 /);
    const connect = await exchange(Buffer.from('CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n'));
    expect(connect).toMatch(/^HTTP\/1\.1 405 /);
    // A well-formed request is a request: its own observation counts it, not this.
    await exchange(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    expect(early).toEqual(['invalid_request', 'unauthorized', 'expectation_failed', 'connect_refused']);
  });

  it('a head the parser refuses while an earlier answer streams cuts the connection: no 400 inside that body', async () => {
    early.length = 0;
    const started = new Promise<void>((resolve) => (halfSent = resolve));
    const socket = net.connect(port, '127.0.0.1', () => socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n'));
    let text = '';
    const closed = once(socket, 'close');
    socket.on('error', () => {});
    await new Promise<void>((resolve) =>
      socket.on('data', (d: Buffer) => {
        text += d.toString('latin1');
        if (text.endsWith('AAAA')) resolve();
      }),
    );
    await started;
    // The next request's head, malformed, arrives while the first answer's body is half sent.
    socket.write('NOT A REQUEST\r\n\r\n');
    await closed;
    finishSlow?.();
    expect(text).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(text).not.toContain('HTTP/1.1 400');
    expect(text.endsWith('AAAA')).toBe(true);
    expect(early).toEqual([]);
  });

  it('a well-formed request on the same server is served', async () => {
    const text = await exchange(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
  });
});
