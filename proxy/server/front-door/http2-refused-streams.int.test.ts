/**
 * Streams node:http2 resets itself before they become requests count against the client's reset
 * budget: a client that opens stream after stream whose header list is past the bound (each one
 * decoded, then reset ENHANCE_YOUR_CALM, with no stream event) gets GOAWAY ENHANCE_YOUR_CALM as a
 * rapid reset does, instead of going on for as long as it likes. A real TLS listener on port 0
 * (proxy/server/listener.ts), frames written by hand.
 */
import http2 from 'node:http2';
import tls from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type FrontDoorServer,
  openTestCertificate,
  startFrontDoorServer,
  type TestCertificate,
} from '../../../test/support/front-door-server.ts';
import type { CertificateAuthority } from '../../../test/harness/tls-certs.ts';
import type { FrontDoor } from '../front-door.ts';
import { frame, PREFACE } from '../../../test/support/http2-frames.ts';
import { RESET_BUDGET } from './http2-session-watch.ts';

const log = pino({ level: 'silent' });
let certificate: TestCertificate;
let ca: CertificateAuthority;
let listening: FrontDoorServer;
let door: FrontDoor;
let port: number;

beforeAll(async () => {
  certificate = await openTestCertificate(log);
  ({ ca } = certificate);
  const { served } = certificate;
  listening = await startFrontDoorServer({
    tls: served,
    log,
    // `/hold` is answered only when its stream goes (at the send timeout, 60 s): a download in progress.
    answer: (req, res) => {
      if (req.url !== '/hold') res.end('ok');
    },
  });
  ({ door, port } = listening);
});

afterAll(async () => {
  await listening.close();
  await certificate.remove();
});

/** `GET /` for 127.0.0.1 in HPACK (static-table names, literal values, no indexing). */
const GET = Buffer.concat([Buffer.from([0x82, 0x87, 0x84, 0x41, 9]), Buffer.from('127.0.0.1')]);
/** A literal field `x` with an 11,000-byte value (HPACK integer 127 + 10,873): two are past the header list bound. */
const BIG_FIELD = Buffer.concat([Buffer.from([0x00, 1, 0x78, 0x7f, 0xf9, 0x54]), Buffer.alloc(11_000, 0x61)]);

describe('HTTP/2 streams refused before they were requests', () => {
  it('a client opening streams past the header list bound, one after another, gets GOAWAY ENHANCE_YOUR_CALM', async () => {
    const state = { goaway: undefined as number | undefined, closed: false, resets: 0 };
    const socket = tls.connect({
      host: '127.0.0.1',
      port,
      ca: ca.certPem,
      servername: 'localhost',
      ALPNProtocols: ['h2'],
    });
    socket.on('error', () => {});
    socket.on('close', () => (state.closed = true));
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (buffer.length >= 9) {
        const length = buffer.readUIntBE(0, 3);
        if (buffer.length < 9 + length) return;
        const type = buffer.readUInt8(3);
        if (type === 7) state.goaway ??= buffer.readUInt32BE(13);
        if (type === 3) state.resets++;
        if (type === 4 && (buffer.readUInt8(4) & 1) === 0) socket.write(frame(4, 1, 0));
        buffer = buffer.subarray(9 + length);
      }
    });
    await new Promise((resolve) => socket.once('secureConnect', resolve));
    socket.write(Buffer.concat([PREFACE, frame(4, 0, 0)]));
    // A request in progress keeps the session from idling out.
    const hold = Buffer.concat([Buffer.from([0x82, 0x87, 0x04, 5]), Buffer.from('/hold'), GET.subarray(3)]);
    socket.write(frame(1, 5, 1, hold));
    const before = door.counters().http2.goaways.rapid_reset;
    // 100 such streams a second for up to 20 s, far past the budget of 200 per 10 s.
    let sent = 0;
    for (let id = 3; sent < 2000 && !state.closed && state.goaway === undefined; id += 2, sent++) {
      socket.write(
        Buffer.concat([frame(1, 1 /* END_STREAM */, id, Buffer.concat([GET, BIG_FIELD])), frame(9, 4, id, BIG_FIELD)]),
      );
      await sleep(10);
    }
    await sleep(300);
    socket.destroy();
    expect(state.resets, 'node:http2 reset them').toBeGreaterThan(RESET_BUDGET.resets);
    expect(state.goaway, `sent ${sent}`).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    expect(door.counters().http2.goaways.rapid_reset).toBe(before + 1);
  }, 60_000);
});
