/**
 * The front door answers heads Node cannot parse on any server it is installed on (the gateway's
 * and the router's alike): 400 with a request id, 401 for bytes HTTP refuses in Authorization, and
 * the connection closes. A real server on port 0, raw sockets.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_FRONT_DOOR, installFrontDoor, serverOptions } from '../front-door.ts';

let server: http.Server;
let port: number;

beforeAll(async () => {
  server = http.createServer(serverOptions(DEFAULT_FRONT_DOOR));
  const door = installFrontDoor(server, DEFAULT_FRONT_DOOR, pino({ level: 'silent' }), (req, res) => {
    if (door.admit(req, res)) res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

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
