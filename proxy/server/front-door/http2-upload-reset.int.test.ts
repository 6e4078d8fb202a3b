import http2 from 'node:http2';
import tls from 'node:tls';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type FrontDoorServer,
  openTestCertificate,
  startFrontDoorServer,
  type TestCertificate,
} from '../../../test/support/front-door-server.ts';
import { FRAME, frame, PREFACE } from '../../../test/support/http2-frames.ts';
import type { CertificateAuthority } from '../../../test/harness/tls-certs.ts';
import type { ServedTls } from '../../tls/served-tls.ts';
import { DEFAULT_FRONT_DOOR } from '../front-door.ts';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL } = http2.constants;
const log = pino({ level: 'silent' });
let certificate: TestCertificate;
let ca: CertificateAuthority;
let served: ServedTls;
let listening: FrontDoorServer | undefined;
const sockets = new Set<tls.TLSSocket>();

beforeAll(async () => {
  certificate = await openTestCertificate(log);
  ({ ca, served } = certificate);
});

afterAll(async () => {
  await certificate.remove();
});

afterEach(async () => {
  for (const s of sockets) s.destroy();
  sockets.clear();
  await listening?.close();
  listening = undefined;
});

/** How the handler saw the request body end: `end <bytes>` or `error <bytes>`. */
async function uploadThen(last: (socket: tls.TLSSocket) => void): Promise<string> {
  let outcome!: (how: string) => void;
  const seen = new Promise<string>((resolve) => (outcome = resolve));
  listening = await startFrontDoorServer({
    limits: { ...DEFAULT_FRONT_DOOR, maxConnections: 10 },
    tls: served,
    log,
    answer: (req, res) => {
      let bytes = 0;
      req.on('data', (chunk: Buffer) => (bytes += chunk.length));
      req.on('end', () => {
        outcome(`end ${bytes}`);
        res.end('stored');
      });
      req.on('error', () => outcome(`error ${bytes}`));
    },
  });
  const socket = tls.connect({
    port: listening.port,
    host: '127.0.0.1',
    ca: ca.certPem,
    servername: 'localhost',
    ALPNProtocols: ['h2'],
  });
  sockets.add(socket);
  socket.on('error', () => {});
  socket.resume();
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  // :method PUT (literal, name from the static table), :scheme https, :path /, :authority localhost; no Content-Length.
  const head = Buffer.concat([
    Buffer.from([0x02, 3]),
    Buffer.from('PUT'),
    Buffer.from([0x87, 0x84, 0x01, 9]),
    Buffer.from('localhost'),
  ]);
  socket.write(
    Buffer.concat([
      PREFACE,
      frame(FRAME.SETTINGS, 0, 0),
      frame(FRAME.HEADERS, 0x4 /* END_HEADERS */, 1, head),
      frame(FRAME.DATA, 0, 1, Buffer.alloc(1000, 0x61)),
    ]),
  );
  last(socket);
  return seen;
}

function rstStream(code: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(code, 0);
  return frame(FRAME.RST_STREAM, 0, 1, payload);
}

describe('an HTTP/2 upload the client resets mid-body', () => {
  it('with NO_ERROR fails its body, as with CANCEL: never a truncated body that ends', async () => {
    expect(await uploadThen((socket) => socket.write(rstStream(NGHTTP2_NO_ERROR)))).toMatch(/^error /);
  });

  it('with CANCEL fails its body', async () => {
    expect(await uploadThen((socket) => socket.write(rstStream(NGHTTP2_CANCEL)))).toMatch(/^error /);
  });

  it('one sent whole (END_STREAM) ends its body', async () => {
    expect(await uploadThen((socket) => socket.write(frame(FRAME.DATA, 0x1 /* END_STREAM */, 1)))).toBe('end 1000');
  });
});
