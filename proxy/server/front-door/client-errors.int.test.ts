import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FrontDoorServer, startFrontDoorServer } from '../../../test/support/front-door-server.ts';

let listening: FrontDoorServer;
let port: number;

beforeAll(async () => {
  listening = await startFrontDoorServer();
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

  it('a well-formed request on the same server is served', async () => {
    const text = await exchange(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    expect(text).toMatch(/^HTTP\/1\.1 200 /);
  });
});
